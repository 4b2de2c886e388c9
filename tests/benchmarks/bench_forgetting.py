"""Benchmark: what a forget costs on PostgreSQL, where it re-keys the buckets that held the deleted keys and
rotates the key-encryption key (every bucket key re-wrapped), by the number of data keys stored, and the ingest
ratio with sealing on PostgreSQL in the same run.

For each size (NOUMENA_BENCH_KEYS, default "1000,100000,1000000"), a fresh schema is filled with that many wrapped
data keys (entity keys of memories, 1,000 people owning one in a thousand each, so a person's keys share a
bucket; the first 20,000 through the store, the rest with COPY as the store writes them: wrapped under their
bucket's key), then one person is forgotten three times over (three people): the forget's latency, its steps
(plan, delete, re-key of the subject's buckets, rotation of the bucket keys under a new KEK, commit), and how
many keys each step re-wrapped. Baseline in the same run: the smallest size's forget, so the printed ratio is what
the store's size adds. Then bench_encryption.py's two
workloads on PostgreSQL (NOUMENA_BENCH_STORE=postgres) at bench_encryption's own sizes (NOUMENA_BENCH_EVENTS,
default 20,000; NOUMENA_BENCH_ROUNDS, default 7): sealed against plaintext ingest, goal >= 0.8. (Smaller runs weigh
a fresh store's first batches more: they create its first ~1,000 keys, each stored before its batch commits; at
5,000 envelopes x 3 the ratio read 0.02-0.04 lower.)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402

from domain.forgetting import ContentKey  # noqa: E402
from infra.adapters.keys.postgres import BUCKETS, PostgresKeyStore, bucket_of  # noqa: E402
from infra.adapters.keys.wrapping import wrap  # noqa: E402
from tests.conftest import postgres_settings  # noqa: E402

SIZES = [int(n) for n in os.environ.get("NOUMENA_BENCH_KEYS", "1000,100000,1000000").split(",")]
PEOPLE = 1000
FILL = 20_000


def _store(home: Path) -> PostgresKeyStore:
    settings = postgres_settings(home)
    return PostgresKeyStore({"host": settings.pg_host, "port": settings.pg_port, "user": settings.pg_user,
                             "password": settings.pg_password.get_secret_value(), "dbname": settings.pg_dbname},
                            settings.pg_schema, home / "keys.kek")


def _fill(store: PostgresKeyStore, start: int, size: int) -> None:
    """Keys `start`..`size` written with COPY, each owned by one of PEOPLE and wrapped under its bucket's key."""
    buckets = {bucket: AESGCM(key) for bucket, key in store._all_bucket_keys().items()}  # noqa: SLF001
    db = store._db  # noqa: SLF001
    with db.transaction(), db.cursor() as cursor:
        for first in range(start, size, FILL):
            numbers = range(first, min(size, first + FILL))
            rows = []
            for n in numbers:
                name = f"bench/entity/memory:{n}"
                bucket = bucket_of(name, [f"person:p{n % PEOPLE}"])
                rows.append(f"{name}\t\\\\x{wrap(buckets[bucket], name, os.urandom(32)).hex()}\t{bucket}")
            with cursor.copy(f"COPY {store._keys} (key_id, key, bucket) FROM STDIN") as copy:  # noqa: SLF001
                copy.write("\n".join(rows) + "\n")
            owners = [f"bench/entity/memory:{n}\tperson:p{n % PEOPLE}" for n in numbers]
            with cursor.copy(f"COPY {store._owners} (key_id, owner) FROM STDIN") as copy:  # noqa: SLF001
                copy.write("\n".join(owners) + "\n")


def measure(size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        store = _store(Path(home))
        started = time.perf_counter()
        store.keys_for([ContentKey(f"bench/entity/memory:{n}", frozenset((f"person:p{n % PEOPLE}",)))
                        for n in range(min(size, FILL))])  # through the store, then the rest straight in:
        _fill(store, min(size, FILL), size)  # (as the store writes them: wrapped under its KEK, with owners)
        fill = time.perf_counter() - started
        runs = []
        for person in range(3):
            started = time.perf_counter()
            deleted = store.forget("bench", f"person:p{person}")
            runs.append((time.perf_counter() - started, dict(store.last_forget), deleted, store.rekeyed,
                         store.rewrapped))
        store._db.execute(f"DROP SCHEMA \"{store._schema}\" CASCADE")  # noqa: SLF001
        store.close()
    best = min(runs, key=lambda r: r[0])
    return {"fill": fill, "forget": best[0], "median": statistics.median(r[0] for r in runs), **best[1],
            "deleted": best[2], "rekeyed": best[3], "rewrapped": best[4]}


def main() -> None:
    print(f"forget on PostgreSQL (re-key the subject's buckets, rotate the KEK over {BUCKETS:,} bucket keys), by "
          f"data keys stored (best of 3 forgets; {PEOPLE} owners)")
    baseline = None
    for size in SIZES:
        m = measure(size)
        baseline = baseline or m["forget"]
        steps = ", ".join(f"{k} {m[k]:.2f} s" for k in ("plan", "open", "delete", "rekey", "rotate", "commit"))
        print(f"  {size:>9,} keys: forget {m['forget']:7.2f} s (median {m['median']:.2f} s; "
              f"{m['forget'] / baseline:6.1f}x the {SIZES[0]:,}-key forget) - {steps}; deleted {m['deleted']:,.0f}, "
              f"re-keyed {m['rekeyed']:,.0f} keys of the subject's buckets, re-wrapped {m['rewrapped']:,.0f} bucket "
              f"keys; filling took {m['fill']:.1f} s")
    os.environ["NOUMENA_BENCH_STORE"] = "postgres"
    import tests.benchmarks.bench_encryption as encryption

    encryption.main()


if __name__ == "__main__":
    main()
