# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv when missing and
# installs the project into it with what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tvbod-installed
# A real-time optimizer wants one BLAS thread (see docs/benchmarks.md); tests are also steadier so.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1

.PHONY: demo test venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,plots,metrics,cluster]'
	touch $(STAMP)

# Two tests need programs from Debian's packages and are skipped, with the reason, without them:
# the browser test of `tvbod report` (chromium) and the alert-rule tests (promtool, in the
# prometheus package): `apt-get install chromium fonts-liberation prometheus` (.ci/run does).
test: $(STAMP)
	@command -v chromium >/dev/null || echo "make test: chromium not found, the report's browser test is skipped (apt-get install chromium fonts-liberation)"
	@command -v promtool >/dev/null || echo "make test: promtool not found, the alert-rule tests are skipped (apt-get install prometheus)"
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m tvbod demo

clean:
	rm -rf $(VENV) runs bench-out
