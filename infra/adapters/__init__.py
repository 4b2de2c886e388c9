"""Adapters: the outside world behind the domain's ports (event log, mapper and sealing, key stores, embedders,
evidence, state snapshots). They import the domain and the projections, never the runtime or the composition root."""
