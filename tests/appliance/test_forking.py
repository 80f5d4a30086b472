"""The fork server: workers forked while the supervisor runs threads are still its children.

Each case runs in a fresh Python process (it becomes a child subreaper, which pytest itself
should not be): a thread is running, as kazoo's would, when the worker is forked through the
server; the worker must see the supervisor as its parent, talk over its control channel, and
be reaped by the supervisor with its own exit code.
"""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import os, socket, threading, time
    from appliance.forking import ForkServer, DirectForker

    def worker_child(index, channel):
        channel.sendall(f"worker {index}".encode())
        return 40 + index

    stop = threading.Event()
    server = ForkServer(worker_child, signals=(), close_in_child=lambda: [])
    busy = threading.Thread(target=stop.wait)  # a thread, as kazoo's, from now on
    busy.start()
    results = {}
    for index in (1, 2):
        pid, channel = server.fork(index)
        said = channel.recv(100).decode()
        _, status = os.waitpid(pid, 0)  # ChildProcessError unless it is our child
        results[index] = (said, os.waitstatus_to_exitcode(status))
    server.close()
    _, status = os.waitpid(server.pid, 0)
    stop.set(); busy.join()
    assert results == {1: ("worker 1", 41), 2: ("worker 2", 42)}, results
    assert os.waitstatus_to_exitcode(status) == 0
    direct = DirectForker(worker_child, signals=(), close_in_child=lambda: [])
    pid, channel = direct.fork(3)
    assert channel.recv(100).decode() == "worker 3"
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 43
    print("ok")
''')


def test_workers_forked_through_the_server_are_the_supervisors_children():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
