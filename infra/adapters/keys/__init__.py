"""Data keys for crypto-shredding, kept outside the log: deleting a key erases every copy of what it sealed.

- `derivation`: what a key is (AES-256), how a group member's key is derived from its group's, how it is named;
- `cache`: the keys a store has already read or written in this process;
- `memory`, `sqlite`, `postgres`: the three stores (`infra.settings` picks one).
"""
