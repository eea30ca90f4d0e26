"""The data engine (``docjepa engine``): an annotation service where the model proposes answer masks and people
correct them, review them, and retrain the model in rounds.

Where things are:

- the service: :mod:`.app` (``create_app``, middleware, error handlers), :mod:`.config` (``ServerConfig``),
  :mod:`.dependencies` (database, user, roles), :mod:`.schemas` (request bodies), :mod:`.routers` (one module per
  resource: auth, tasks, pages, annotations, review, stats, rounds, users, uploads), ``static/`` (the page);
- the data: :mod:`.tables` (SQLAlchemy models), :mod:`.db` (connections, Alembic ``migrations/``), :mod:`.store`
  (every transaction, by resource), :mod:`.masks` (RLE, PNG, rectangles), :mod:`.uploads`, :mod:`.export`
  (COCO, JSON lines, shards), :mod:`.stats` (dashboard);
- the model: :mod:`.model` (``EngineModel``: propose, score, fine-tune), :mod:`.proposer` (its worker thread in
  the server), :mod:`.stages` and :mod:`.automation` (the engine's own questions, automatic labels),
  :mod:`.retrain` (rounds), :mod:`.launcher` (child processes);
- the command: :mod:`.cli` (options) and :mod:`.commands` (what each does);
- measuring it without people: :mod:`.simulation` (scripted annotator, simulated rounds, the engine curve).
"""
