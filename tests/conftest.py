"""Suite-wide options: `slow` tests are opt-in (`pytest -m slow`), as pyproject's marker list says; torch runs on one
intra-op thread in the test process and in every child it starts (servers, services, interpreters)."""

import os
import sys

import pytest

# Many tests run a server process beside this one. With two OpenMP threads each on a 2-core machine they spin against
# each other: the suite took twice as long (a parity test: 284 s with 2 threads, 142 s with 1, same load).
# Set before any test module imports torch; children inherit the environment.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


# The longest tests go first, the longest of them first of all, so that the parallel workers do not end the run with
# one of them running alone while the others idle (with `--maxschedchunk=1`, as `make test` runs: pytest-xdist
# otherwise hands each worker a block of consecutive tests up front, and the first block would hold them all). Order
# only: each test still sets up all it needs. Seconds on one worker (the Dec 6 fresh-clone run, and alone after the
# fuzz, memory-rounds and gguf-kernel tests were made cheaper): the user install ~80, each bench quick run 15-35,
# memory rounds ~27, the editor tiers and the shared-service tests 20-40 (an earlier durations list), each grammar's
# fuzz run ~10-25, the real pieces' self-check ~18, the gguf kernel in the interpreter ~16.
# (Grouping a module's tests that share a module-scoped server on one worker, `--dist loadgroup`, would set each up
# once instead of once per worker, but pytest-xdist 3.8 cannot rename nodes under pytest 9.2: no group is formed.)
LONGEST = ("tests/install/test_user_install.py", "tests/bench/", "tests/reliability/test_memory_rounds.py",
           "tests/editors/", "tests/service/test_lsp_shared.py", "tests/reliability/test_fuzz_fill.py",
           "tests/engine/test_selfcheck.py::test_the_real_pieces", "tests/quant/test_gguf_kernel.py")


def rank(item: pytest.Item) -> int:
    """The place of the first LONGEST prefix the test's id starts with (len(LONGEST) for the rest)."""
    return next((i for i, prefix in enumerate(LONGEST) if item.nodeid.startswith(prefix)), len(LONGEST))


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle: each part keeps its shuffled order
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=rank)
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: opt in with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """A test that changes torch's thread count (bench smoke tests, training) does not change it for the next."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch else None
    yield
    if torch is not None and torch.get_num_threads() != before:
        torch.set_num_threads(before)
