"""nccl-tests output parser: the two real logs in tests/data/nccl_samples and synthetic variants of every
format generation listed in that directory's README (and reference/hardware.md §2.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parplan.errors import ConfigError
from parplan.hardware.nccl_tests import nccl_version, parse_nccl_tests, parse_nccl_tests_file

SAMPLES = Path(__file__).parent / "data" / "nccl_samples"
H200 = SAMPLES / "h200_2node_16gpu_all_reduce_nccl2.30.txt"
H100 = SAMPLES / "h100_2node_16gpu_all_reduce_gcp_a3mega.txt"


def _row(samples, size, in_place=False):
    (hit,) = [s for s in samples if s.size_bytes == size and s.in_place == in_place]
    return hit


def test_h200_file_rows_and_values():
    samples = parse_nccl_tests_file(H200)
    assert len(samples) == 2 * 25  # 25 rows (samples README), out-of-place + in-place each
    assert {(s.collective, s.ranks, s.ranks_per_node) for s in samples} == {("all_reduce", 16, 8)}
    assert all(s.source == str(H200) and s.dtype == "float" for s in samples)
    # Values read from h200_2node_16gpu_all_reduce_nccl2.30.txt:
    big = _row(samples, 17179869184)
    assert (big.time_us, big.algbw_gbps, big.busbw_gbps) == (66326.9, 259.02, 485.66)
    assert _row(samples, 17179869184, in_place=True).busbw_gbps == 485.52
    assert (_row(samples, 1073741824).time_us, _row(samples, 1073741824).busbw_gbps) == (4388.55, 458.75)
    # "4294967296 ... 16715.2": a time printed with one decimal to fit the width-7 column.
    assert _row(samples, 4294967296).time_us == 16715.2
    small = _row(samples, 1024, in_place=True)
    assert (small.time_us, small.busbw_gbps) == (43.74, 0.04)
    assert nccl_version(H200.read_text()) == "2.30.4"


def test_h100_file_needs_collective_and_parses():
    # The 2022-2025 format names no collective: no 'Collective test starting' line, no binary name.
    with pytest.raises(ConfigError, match="collective"):
        parse_nccl_tests_file(H100)
    samples = parse_nccl_tests_file(H100, collective="all_reduce")
    assert len(samples) == 2 * 31  # 31 rows (samples README)
    assert {(s.ranks, s.ranks_per_node) for s in samples} == {(16, 8)}  # 16 device lines on 2 hostnames
    # Values read from h100_2node_16gpu_all_reduce_gcp_a3mega.txt:
    assert _row(samples, 8589934592).busbw_gbps == 338.82
    assert _row(samples, 8589934592, in_place=True).time_us == 47743
    assert (_row(samples, 2147483648).time_us, _row(samples, 2147483648).busbw_gbps) == (12646, 318.40)
    assert _row(samples, 8).time_us == 135.8
    assert nccl_version(H100.read_text()) is None


OLD_ALL_GATHER = """\
$ ./build/all_gather_perf -b 1M -e 4M -f 2 -g 8
# nThread 1 nGpus 8 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  12345 on     node01 device  0 [0x07] Tesla V100-SXM2-32GB
#   Rank  1 Pid  12345 on     node01 device  1 [0x0a] Tesla V100-SXM2-32GB
#   Rank  2 Pid  12345 on     node01 device  2 [0x0b] Tesla V100-SXM2-32GB
#   Rank  3 Pid  12345 on     node01 device  3 [0x85] Tesla V100-SXM2-32GB
#   Rank  4 Pid  12345 on     node01 device  4 [0x86] Tesla V100-SXM2-32GB
#   Rank  5 Pid  12345 on     node01 device  5 [0x89] Tesla V100-SXM2-32GB
#   Rank  6 Pid  12345 on     node01 device  6 [0x8a] Tesla V100-SXM2-32GB
#   Rank  7 Pid  12345 on     node01 device  7 [0x8b] Tesla V100-SXM2-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576         32768   float    none    54.12   19.38   16.95  0e+00    53.20   19.71   17.25  0e+00
     2097152         65536   float    none    80.51   26.05   22.79  0e+00    79.93   26.24   22.96  0e+00
     4194304        131072   float    none    130.2   32.21   28.19  0e+00    129.8   32.31   28.27  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 22.8
"""


def test_old_format_without_root_and_with_error_column():
    samples = parse_nccl_tests(OLD_ALL_GATHER, source="old.txt")
    assert len(samples) == 6
    assert {(s.collective, s.ranks, s.ranks_per_node) for s in samples} == {("all_gather", 8, 8)}
    row = _row(samples, 4194304, in_place=True)
    assert (row.time_us, row.algbw_gbps, row.busbw_gbps) == (129.8, 32.31, 28.27)


def test_old_rows_without_any_header_use_the_token_count():
    rows = "\n".join(line for line in OLD_ALL_GATHER.splitlines() if not line.startswith(("#", "$")))
    samples = parse_nccl_tests(rows, collective="all_gather", ranks=8)
    assert [s.time_us for s in samples[:2]] == [54.12, 53.20]


@pytest.mark.parametrize("prefix", ["[0] ", " 0: ", "[1,0]<stdout>:"])
def test_launcher_prefixes(prefix):
    text = H200.read_text()
    plain = parse_nccl_tests(text)
    tagged = parse_nccl_tests("\n".join(prefix + line for line in text.splitlines()))
    assert tagged == plain


ALLTOALL_NO_CHECK = """\
# nccl-tests version 2.18.3 nccl-headers=22703 nccl-library=22703
# Collective test starting: alltoall_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 0 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on     gpu-a device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   4243 on     gpu-a device  1 [0000:3c:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   4244 on     gpu-b device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   4245 on     gpu-b device  1 [0000:3c:00] NVIDIA H100 80GB HBM3
gpu-a:4242:4290 [0] NCCL INFO Channel 00/32 : 0 1 2 3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
     1048576         65536     float    none      -1    60.10   17.45   13.08     N/A    59.80   17.53   13.15     N/A
[1777406131.465474] [gpu-b:4244:0]          parser.c:2305 UCX  WARN  unused environment variable: UCX_IB_GID_INDEX

gpu-a:4242:4290 [0] NCCL INFO 2097152 Bytes -> Algo 1 proto 2 time 95.2
     2097152        131072     float    none      -1   1.2e+05    0.02    0.01     N/A   98.30   21.33   16.00     N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 10.56
#
# Collective test concluded: alltoall_perf
"""  # noqa: E501 (verbatim nccl-tests widths)


def test_new_format_with_na_noise_and_scientific_time():
    samples = parse_nccl_tests(ALLTOALL_NO_CHECK)
    assert len(samples) == 4  # the NCCL INFO and UCX lines inside the table are skipped
    assert {(s.collective, s.ranks, s.ranks_per_node) for s in samples} == {("all_to_all", 4, 2)}
    assert _row(samples, 2097152).time_us == 1.2e5
    assert _row(samples, 1048576, in_place=True).busbw_gbps == 13.15
    assert nccl_version(ALLTOALL_NO_CHECK) == "2.27.3"  # from nccl-library=22703


PER_ITER_AND_TIMESTAMPS = """\
# Collective test starting: reduce_scatter_perf
# nThread 1 nGpus 8 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
# Per-Iteration Report: CUDA event timing; i_* uses max over process rows
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
#
#                                    out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
        1024            32     float     sum      -1    30.50    0.03    0.03       0    28.10    40.20    39.00     5.10    31.20    0.03    0.03       0    29.00    41.00    40.00     4.90
        2048            64     float     sum      -1    31.00    0.07    0.06       0    29.10    42.20    41.00     5.30    32.40    0.06    0.06       0    30.00    43.00    42.00     5.00
# Collective test starting: sendrecv_perf
# nThread 1 nGpus 8 minBytes 1024 maxBytes 1024 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong            timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)          %Y-%m-%d %H:%M:%S
        1024           256     float     sum      -1    12.10    0.08    0.08       0    12.30    0.08    0.08       0  2026-07-01 12:00:00
# Collective test starting: reduce_perf
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
        1024           256     float     sum       0    14.10    0.07    0.07       0    14.30    0.07    0.07       0
"""  # noqa: E501 (verbatim nccl-tests widths)


def test_per_iteration_columns_timestamps_and_several_tests_in_one_log():
    samples = parse_nccl_tests(PER_ITER_AND_TIMESTAMPS)
    rs = [s for s in samples if s.collective == "reduce_scatter"]
    assert [(s.time_us, s.in_place) for s in rs[:2]] == [(30.50, False), (31.20, True)]
    assert {s.ranks for s in rs} == {8}  # nThread 1 × nGpus 8, no device lines
    (sr_out, sr_in) = [s for s in samples if s.collective == "send_recv"]
    assert (sr_out.time_us, sr_in.time_us) == (12.10, 12.30)
    # reduce_perf is not a collective the cost model uses: its rows are skipped.
    assert {s.collective for s in samples} == {"reduce_scatter", "send_recv"}


def test_ranks_inferred_from_busbw_when_no_header():
    rows = [line for line in H200.read_text().splitlines() if line.strip()[:1].isdigit()]
    samples = parse_nccl_tests("\n".join(rows), collective="all_reduce")
    assert {(s.ranks, s.ranks_per_node) for s in samples} == {(16, 16)}  # no hostnames: one node assumed
    assert {s.ranks_per_node for s in parse_nccl_tests("\n".join(rows), collective="all_reduce",
                                                       ranks_per_node=8)} == {8}


def test_no_rows_raises_config_error_naming_the_file(tmp_path):
    text = "\n".join(line for line in H200.read_text().splitlines() if not line.strip()[:1].isdigit())
    with pytest.raises(ConfigError, match=r"^empty\.log: no nccl-tests data rows") as err:
        parse_nccl_tests(text, source="empty.log")
    assert err.value.file == "empty.log"
    path = tmp_path / "noise.txt"
    path.write_text("ssh: connect to host node02 port 22: Connection refused\n")
    with pytest.raises(ConfigError, match="noise.txt"):
        parse_nccl_tests_file(path)
    with pytest.raises(ConfigError, match="no such file"):
        parse_nccl_tests_file(tmp_path / "missing.txt")


def test_unknown_collective_argument():
    with pytest.raises(ConfigError, match="unknown collective 'allreduce'"):
        parse_nccl_tests(H200.read_text(), collective="allreduce")
