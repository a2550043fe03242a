"""passes_ranks.py's and graphs_ranks.py's probes in one process, sglang imported once for both
(each run forks its own ranks): ``ranks.py LABEL TIMEOUT`` prints {"passes": passes_ranks'
output for mode LABEL, "graphs": graphs_ranks' output for every scenario it has}."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import graphs_ranks  # noqa: E402
import passes_ranks  # noqa: E402


def main():
    label, timeout = sys.argv[1:]
    assert graphs_ranks.NUM_EXPERTS % graphs_ranks.WORLD == 0
    passes = {"plan": passes_ranks.plan(), label: passes_ranks.run_mode(label, float(timeout))}
    graphs = {scenario: graphs_ranks.run_scenario(scenario, float(timeout)) for scenario in graphs_ranks.EVERY_SCENARIO}
    print(json.dumps({"passes": passes, "graphs": graphs}))


if __name__ == "__main__":
    main()
