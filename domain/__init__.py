"""The pure core of noumena: entities, facts, sessions, recalls and their rules. No I/O lives here."""
