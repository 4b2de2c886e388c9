"""The work a forget leaves behind runs in the background class: it must really be there (Linux, where noumena is
served and tested), and lowering a thread must leave the rest of the process as it was."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from infra.runtime.priority import lower_to_background


def test_a_process_lowered_to_the_background_runs_in_the_idle_class_and_so_do_its_new_threads() -> None:
    code = ("import os, threading\n"
            "from infra.runtime.priority import lower_to_background\n"
            "print(lower_to_background())\n"
            "seen = []\n"
            "t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(threading.get_native_id())))\n"
            "t.start(); t.join()\n"
            "print(os.sched_getscheduler(0) == os.SCHED_IDLE, seen[0] == os.SCHED_IDLE)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.stdout.split() == ["idle", "True", "True"], done.stdout + done.stderr


def test_lowering_one_thread_leaves_the_process_as_it_was() -> None:
    before = os.sched_getscheduler(0)
    seen: list[tuple[str, int]] = []

    def background() -> None:
        seen.append((lower_to_background(thread_only=True), os.sched_getscheduler(threading.get_native_id())))

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == [("idle", os.SCHED_IDLE)]
    assert os.sched_getscheduler(0) == before != os.SCHED_IDLE
