"""A pytest plugin for tests/opencl/pyopencl-suite: each test's start and
each phase's outcome, one JSON line each, appended to the file
TERN_PYTEST_OUTCOMES names as they happen, so a run that crashes or hangs
still says which test it was in."""
import json
import os


def _write(record):
    with open(os.environ['TERN_PYTEST_OUTCOMES'], 'a') as f:
        f.write(json.dumps(record) + '\n')


def pytest_runtest_logstart(nodeid, location):
    _write({'start': nodeid})


def pytest_runtest_logreport(report):
    _write({'id': report.nodeid, 'when': report.when, 'outcome': report.outcome})
