# The Usher image: one image for every service (`usher run <service>`, deploy/) and the
# migration Job. Build: docker build -t ghcr.io/usher/usher:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY usher ./usher
COPY services ./services
COPY schemas ./schemas
COPY migrations ./migrations
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin usher
USER 10001:10001
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 USHER_HOME=/tmp/usher
EXPOSE 9102
ENTRYPOINT ["usher"]
CMD ["--help"]
