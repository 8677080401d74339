"""What the Python tests share: the harness that runs iscsigwd on loopback (harness), a minimal
iSCSI initiator (iscsi_client), the CSI plugin and the generated gRPC stubs (csi_harness,
csi_stubs), a throwaway Ceph cluster (ceph_cluster), libiscsi's results against the expectations
file (cu_results), the fencing check (fence_check), the version and commit a build should report
(build_info), a launcher that runs the daemon under a seccomp filter refusing io_uring
(no_io_uring), and the scenarios that run against more than one kind of LUN or gateway
(abort_storm, crash_consistency).

tests/lib goes on PYTHONPATH: tests/CMakeLists.txt sets it for every Python test, scripts/bench.sh
for the benchmarks; by hand, docs/contributing.md. A helper used by the tests of one directory only
stays there (tests/interop/guest.py, tests/bench/e2e_vs_tgtd.py), imported as a sibling.
"""
