"""The use cases, one feature service per module, each a handful of methods that take the caller first
(domain/access.py) and decide there what it may do: `Tenants`, `Facts` (writing memory: facts, envelopes,
entities registered), `Entities` (finding and curating entities), `Views` (the read model's views), `Reading`
(what an agent is served: perspectives, contexts, searches, recall by tier, each a recorded use with evidence),
`Forgetting` and `Consolidation`. They share `Core` (core.py): running commands, read-your-writes, who may.
domain/application/application.py's `Application` composes them; every entry point calls them through it."""
