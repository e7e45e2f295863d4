"""Parser throughput through the Python API, token-sized chunks at 2 KB, 32 KB and 256 KB.

    pytest benches/test_bench_parsers.py --benchmark-enable

Reports the median per chunk; the summary test prints CPU time per chunk and per-byte cost
at 256 KB relative to 2 KB (the linearity ratio) for every format, side by side.
"""

from __future__ import annotations

import statistics
import time

import pytest

from corpus import FORMATS, TOOLS, output_text, token_chunks
from shakedown.parsers import ChatParser

SIZES = {"2KB": 2 * 1024, "32KB": 32 * 1024, "256KB": 256 * 1024}


def run(fmt: str, chunks: list[str]) -> None:
    parser = ChatParser(tools=TOOLS, **FORMATS[fmt])
    feed = parser.feed
    for chunk in chunks:
        feed(chunk)
    parser.finish()


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_parser_stream(benchmark, fmt: str, size: str) -> None:  # type: ignore[no-untyped-def]
    chunks = token_chunks(output_text(fmt, SIZES[size]))
    benchmark.extra_info["chunks"] = len(chunks)
    benchmark.pedantic(run, args=(fmt, chunks), rounds=5 if size == "256KB" else 20)


def per_chunk_ns(fmt: str, chunks: list[str], rounds: int) -> float:
    """Median CPU time of this thread per chunk: on a machine shared with other work, wall
    time would add whatever the scheduler gave others, more the longer a run lasts."""
    times = []
    for _ in range(rounds):
        start = time.thread_time_ns()
        run(fmt, chunks)
        times.append(time.thread_time_ns() - start)
    return statistics.median(times) / len(chunks)


def test_linearity_table(capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for fmt in FORMATS:
        texts = {size: output_text(fmt, n) for size, n in SIZES.items()}
        chunks = {size: token_chunks(t) for size, t in texts.items()}
        ns = {size: per_chunk_ns(fmt, chunks[size], 7 if size == "256KB" else 31) for size in SIZES}
        per_byte = {
            size: ns[size] * len(chunks[size]) / len(texts[size].encode()) for size in SIZES
        }
        rows.append((fmt, ns, per_byte["256KB"] / per_byte["2KB"]))
    with capsys.disabled():
        print("\nformat                 CPU ns/chunk 2KB  32KB   256KB   per-byte 256KB/2KB")
        for fmt, ns, ratio in rows:
            print(f"{fmt:22} {ns['2KB']:8.0f} {ns['32KB']:6.0f} {ns['256KB']:7.0f}   {ratio:5.2f}x")
