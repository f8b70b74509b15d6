"""The tutorial's harness: a session, a rotation, a crash in another process, the recovery.

Run it from a checkout after ``pip install .``: ``python docs/tutorial.py``.
It works in a fresh temporary root and prints what happens at each step.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from sessiontemp import Manager, recover

root = Path(tempfile.mkdtemp()) / "root"

# -- 1. a session: one owner, one command in a private directory
session = Manager(root)
session.retain()
with session.acquire(label="first command") as lease:
    lease.popen(["sh", "-c", 'echo hello > "$TMPDIR/note"']).wait()
    first = lease.path
    print("1. the command wrote", (first / "note").read_text().strip(), "into",
          first.relative_to(root))

# -- 2. rotate: later commands get a fresh directory; the old one goes with its last lease
session.rotate()
with session.acquire(label="after rotate") as lease:
    print("2. now", lease.path.relative_to(root), "and the first one exists:", first.exists())

# -- 3. a crash: another process leases a directory and is killed with SIGKILL
doomed = ("import sys, time; from sessiontemp import Manager; m = Manager(sys.argv[1]); "
          "m.retain(); print(m.acquire(label='doomed').path, flush=True); time.sleep(60)")
other = subprocess.Popen([sys.executable, "-c", doomed, root], stdout=subprocess.PIPE, text=True)
left = Path(other.stdout.readline().strip())
other.kill()  # SIGKILL: nothing in it gets to clean up
other.wait()
print("3. the killed process left", left.relative_to(root), "on disk:", left.exists())

# -- 4. recovery: the next pass finds that manager dead and removes what it left
report = recover(root)
print("4. recovery removed", [r.path.name for r in report.removed], "on disk:", left.exists())

# -- 5. the end: the last release seals the session, close gives up journal and locks
session.release()
print("5. sealed:", session.sealed, "closed:", session.closed)
session.close()
session.rotate()  # after the end, retain, rotate and release return silently
print("   sealed:", session.sealed, "closed:", session.closed)
print("the whole story: journal-inspect --root", root, "events")
