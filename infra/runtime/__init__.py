"""The runtime: the processes and threads a served process runs (the projector's follower, the engines that serve
reads through it, the state snapshotter, the purge worker, readiness) and the process-wide settings of the program."""
