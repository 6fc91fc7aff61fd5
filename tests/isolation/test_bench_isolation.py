"""What ``moonbox bench`` says of the machine while it measures process isolation."""

from __future__ import annotations

from moonbox.bench._isolation import IsolationBench, _watched


def test_a_sample_that_ends_with_the_cpus_contended_is_counted():
    bench = IsolationBench("isolated-no-state")
    try:
        reader = bench.sandbox._worker._reader
        verdicts = iter([False, True, True, False])

        def sample() -> float:
            bench.handler("trivial")()
            reader.contended = next(verdicts)  # what the reader's last check found
            return 1.0

        contended = [0]
        watched = _watched(sample, bench.sandbox, contended)
        assert [watched() for _ in range(4)] == [1.0] * 4
        assert contended == [2]
    finally:
        bench.close()
