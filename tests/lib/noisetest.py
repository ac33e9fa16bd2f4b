"""The machine's noise floor under a test that compares a time the agent (or
a client) took with a capture's: build/tests/noise-probe (tests/noise_probe.c)
records every moment a CPU ran nothing of this machine's programs for longer
than it should have (a SCHED_FIFO thread per CPU, woken every 200 µs on a
deadline, came late).  Measured on this 2-CPU virtual machine, idle: a few
hundred such stalls over 200 µs in 5 s, tens over 1 ms, the longest 6-12 ms.
A thread of a traced program caught in one waits as long, whatever the agent
does, so a difference with the wire beyond its bound is the noise's, not the
agent's, exactly when a stall at least as long as the excess (less the
probe's period, its resolution) overlaps the two instants compared.  Such
differences are left out of the bound and counted; they may be at most
NOISE_SHARE of a test's samples: more, and the test fails as for any other."""
import os, signal, subprocess

import kpitest

PROBE = os.path.join(kpitest.BUILD, "tests", "noise-probe")
PERIOD_US = 200         # the probe's resolution, and its cost: 2 x 5000 wake-ups a second
NOISE_SHARE = 0.05


class Probe:
    """noise-probe running from construction to stop(); stop() returns the
    stalls as (cpu, start_ns, end_ns, the probe's period in ns), CLOCK_REALTIME."""

    def __init__(self, period_us=PERIOD_US):
        if not os.path.exists(PROBE):
            raise AssertionError(f"{PROBE} is not built: run make")
        self.period_ns = period_us * 1000
        self.p = subprocess.Popen([PROBE, "--period-us", str(period_us)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        kpitest.on_cleanup(self.stop)
        line = self.p.stdout.readline().decode(errors="replace").strip()
        if line != "ready":
            raise AssertionError(f"noise-probe did not start: {line} {self.p.stderr.read().decode()[:300]}")
        self.stalls = None

    def stop(self):
        if self.stalls is None:
            self.p.send_signal(signal.SIGTERM)
            out, err = self.p.communicate(timeout=30)
            assert self.p.returncode == 0, f"noise-probe exited {self.p.returncode}: {err.decode()[:300]}"
            self.stalls = sorted((int(c), int(a), int(b), self.period_ns) for c, a, b in
                                 (l.split() for l in out.decode().splitlines()))
        return self.stalls


def explains(stalls, t_a, t_b, excess_ns):
    """A stall at least excess_ns long (less the probe's period) overlapping
    the instants t_a and t_b (ns, CLOCK_REALTIME, either order), widened by
    the period: the stall that makes the difference, or None."""
    for s in stalls:
        period = s[3]
        if s[1] <= max(t_a, t_b) + period and s[2] >= min(t_a, t_b) - period and \
                s[2] - s[1] + period >= excess_ns:
            return s
    return None


def judged(samples, bound_ns, stalls, label):
    """samples: (diff_ns, t_a, t_b, name).  The samples the bound judges:
    all but those beyond it that a stall explains, which are printed and may
    be at most NOISE_SHARE of the samples (and at least one)."""
    kept, noise = [], []
    for d, a, b, name in samples:
        s = explains(stalls, a, b, abs(d) - bound_ns) if abs(d) > bound_ns else None
        if s:
            noise.append((name, d, s))
        else:
            kept.append((d, a, b, name))
    n = len(samples)
    if noise:
        print(f"     {label}: {len(noise)} of {n} beyond the bound during a measured stall of the machine: " +
              ", ".join(f"{name} {d / 1e3:+.1f} µs (cpu {s[0]} stalled {(s[2] - s[1]) / 1e3:.0f} µs)"
                        for name, d, s in noise[:5]))
    assert len(noise) <= max(1, int(NOISE_SHARE * n)), \
        f"{label}: {len(noise)} of {n} samples beyond the bound in the machine's noise: too noisy to judge"
    return kept
