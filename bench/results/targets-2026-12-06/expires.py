import re, sys
# usage: python3 expires.py RUN.err ...: for each run of bench/cmd/compare
# -only envoy, sluice's EXPIREs a decision and decisions a Redis read in
# each round of each setting (from the "Redis commands of sluice" lines).
for f in sys.argv[1:]:
    print("==", f)
    cmds = None
    for line in open(f):
        if "Redis commands of sluice" in line:
            cmds = line
            continue
        m = re.match(r"\s+(\S+)\s+(\d+) callers, round (\d+): sluice envoy_rls\s+(\d+) decisions/s", line)
        if m and cmds:
            e = re.search(r"expire ([\d.]+) calls/decision", cmds)
            r = re.search(r"([\d.]+) decisions per read", cmds)
            print(f"{m.group(1):12} {m.group(2):>4} r{m.group(3)}  expire {e.group(1) if e else '0'}  decisions a read {r.group(1) if r else '?'}")
            cmds = None
