# Convenience only: the commands are scripts/run and scripts/test (and manage.py bench_all for `make bench`).
.PHONY: run test bench

run:
	scripts/run

test:
	scripts/test $(ARGS)

# The whole benchmark (manage.py bench_all): make bench ARGS='--scale 0.1'
bench:
	scripts/bootstrap
	.venv/bin/python manage.py bench_all $(ARGS)
