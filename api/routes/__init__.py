"""One router per resource. Routes parse, call the application, and map the result: nothing else."""
