"""The decision engine, in layers (each imports only those below it; import-linter checks it):

- ``snapshot``: the engine's durable state as bytes, and back (rebuilds the rest).
- ``facade``: ``Engine``, the thin façade: ``apply``, ``decide``, ``preview_pass``,
  ``next_wakeup`` and the read-side queries, delegating to the modules below.
- ``queries``: read-side answers (job views, queues, reasons) over the context.
- ``backfill`` (N2), ``starvation`` (N1), ``decision_pass`` (one pass), ``pass_memo`` (what
  one pass learns about its leaves), ``pass_end`` (where the rest of a pass can move nothing),
  ``reclaim_search`` (victims), ``budget_overrun`` (B2): the parts of a pass, each taking an
  ``EngineContext``.
- ``context``: ``EngineContext``, everything a part reads and changes, built up from:
  ``folding`` (events and decisions folded into state), ``offers`` (leaf offers and pruning),
  ``shortfall`` (why a job does not fit now), ``stops`` (victims stopping and residuals),
  ``placing`` (nodes and zones served, queues, admitting and un-admitting), ``books`` (holds,
  budgets, fair share), ``refusals`` (what reclaim refuses without a search, per leaf and
  shape), ``accounting`` (quota and zone usage, fit), ``data`` (the fields).
- ``policy`` (what Round and Block change), ``pass_plan`` (how a pass's decisions are carried
  out).

Nothing outside this package reads the engine's private members, and no module of it reads
another's: what the parts share is public on the context.
"""
