"""`make lint`'s class-size check (tests/check_class_size.py): no class in the tree has more than 15 public methods."""

from __future__ import annotations

from pathlib import Path

from tests.check_class_size import findings


def test_no_class_in_the_tree_has_more_than_fifteen_public_methods():
    assert findings() == []


def test_the_check_counts_public_methods_and_properties_only_and_skips_the_venv(tmp_path: Path):
    many = "\n".join(f"    def m{i}(self): ...\n" for i in range(16))
    (tmp_path / "big.py").write_text(f"class Big:\n{many}")
    fifteen = "\n".join(f"    def m{i}(self): ...\n" for i in range(14))
    (tmp_path / "ok.py").write_text(f"class Ok:\n{fifteen}\n    @property\n    def p(self): ...\n"
                                    "    def _private(self): ...\n    def __len__(self): ...\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "lib.py").write_text(f"class Vendor:\n{many}")
    assert findings(tmp_path) == ["big.py:1: class Big has 16 public methods (at most 15: split it by job)"]
