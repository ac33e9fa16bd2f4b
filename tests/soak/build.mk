# tests/soak/build.mk - `make soak`, kpi-agent's part (issue 11): the fault
# tests of tests/test_agent_faults.py in their long versions (KPI_SOAK=1):
# 60 target lifetimes under load, 10 agent SIGKILLs, a 20 s full disk.
# Numbers land in build/reliability/agent_faults.json (docs/reliability.md).
# Double-colon: other parts (tests/fuzz/build.mk) add their own soak recipes.
.PHONY: soak soak-agent
soak:: soak-agent
soak-agent: all
	$(Q)KPI_SOAK=1 $(PYTHON) tests/run.py --filter test_agent_faults
