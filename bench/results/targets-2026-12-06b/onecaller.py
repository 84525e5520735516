import re, sys
# usage: python3 onecaller.py RUN.err ...: each one-caller round's Redis CPU
# a decision (µs) for sluice and envoyproxy/ratelimit, and their ratio in
# that round (the two services ran one after the other).
pat = re.compile(r"^\s*(\S+)\s+1 callers, round (\d+): (envoyproxy/ratelimit|sluice envoy_rls)\s+(\d+) decisions/s.*Redis\s+([\d.]+) µs/decision")
for f in sys.argv[1:]:
    rounds = {}
    for line in open(f):
        m = pat.match(line)
        if m:
            w, r, svc, rps, redis = m.groups()
            rounds.setdefault((w, int(r)), {})["s" if svc.startswith("sluice") else "e"] = (int(rps), float(redis))
    name = f.rsplit("/", 1)[-1]
    for (w, r), v in sorted(rounds.items()):
        if "s" in v and "e" in v:
            print(f"{name:10s} {w:12s} round {r}: sluice {v['s'][1]:5.1f} µs ({v['s'][0]}/s)  envoy {v['e'][1]:5.1f} µs ({v['e'][0]}/s)  ratio {v['s'][1]/v['e'][1]:.2f}")
