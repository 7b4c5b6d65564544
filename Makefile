# Convenience only: the commands are scripts/run and scripts/test (and manage.py bench_all for `make bench`).
.PHONY: run test bench cluster

run:
	scripts/run

test:
	scripts/test $(ARGS)

# The whole benchmark (manage.py bench_all): make bench ARGS='--scale 0.1'
bench:
	scripts/bootstrap
	.venv/bin/python manage.py bench_all $(ARGS)

# The multi-node topology on this machine (three PostgreSQL nodes under Patroni and etcd, Redis, two
# workers, two app servers behind haproxy); `scripts/cluster status` in another shell shows each part.
cluster:
	scripts/cluster $(ARGS)
