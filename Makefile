# Convenience only: the commands are scripts/run and scripts/test.
.PHONY: run test

run:
	scripts/run

test:
	scripts/test $(ARGS)
