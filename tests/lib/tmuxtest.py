"""A terminal program under tmux for the interactive tests (kpitop's screens):
started in a detached session of its own server, keys sent, the screen
captured whole, resized; killed at the test's cleanup."""
import os, shutil, subprocess, time

import kpitest


class Tmux:
    def __init__(self, argv, w=120, h=40):
        if not shutil.which("tmux"):
            raise kpitest.Skip("tmux is not installed (make deps)")
        self.sock = f"kpitop-test-{os.getpid()}-{time.monotonic_ns()}"
        cmd = " ".join(argv) + "; echo EXITED $?; sleep 30"
        env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8", TZ="UTC", TERM="xterm-256color")
        subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                        "-x", str(w), "-y", str(h), cmd], check=True, env=env)
        kpitest.on_cleanup(self.kill)

    def kill(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)

    def keys(self, *keys):
        subprocess.run(["tmux", "-L", self.sock, "send-keys", "-t", "t", *keys], check=True)

    def screen(self):
        return subprocess.run(["tmux", "-L", self.sock, "capture-pane", "-p", "-t", "t"],
                              capture_output=True, text=True).stdout

    def wait(self, pred, what, timeout=10):
        """The first whole frame that satisfies pred.  tmux may parse one of kpitop's
        frames in several reads, so a single capture can show the new header above the
        old rows; a frame counts only once a second capture right after it is the same."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.screen()
            if pred(s):
                time.sleep(0.02)
                if self.screen() == s:
                    return s
                continue
            if time.monotonic() > deadline:
                raise AssertionError(f"screen never showed {what}:\n{s}")
            time.sleep(0.1)

    def resize(self, w, h):
        subprocess.run(["tmux", "-L", self.sock, "resize-window", "-t", "t", "-x", str(w), "-y", str(h)],
                       check=True)
