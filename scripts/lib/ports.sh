# Free ports and waiting for a listener, for the scripts that start servers (sourced, not run). One copy:
# the benchmarks, the evaluations and the test steps source it. `wait_port` prints the logs under
# `$work` (when a caller has one) before it gives up.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "nothing on port $1" >&2; [ -n "${work:-}" ] && cat "$work"/*.log >&2 2>/dev/null; exit 1; }
