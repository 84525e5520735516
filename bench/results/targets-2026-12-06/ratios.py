import sys
# usage: python3 ratios.py RUN.txt ...: each setting's CPU-above-the-floor
# ratio and Redis ratio (sluice ÷ envoyproxy/ratelimit, the kept rounds)
# in each run's table, side by side; * marks a target missed (⅓ and ½ at
# 32 callers and more, 1 at one caller).
cells, runs = {}, []
for f in sys.argv[1:]:
    name = f.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    runs.append(name)
    for line in open(f):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) < 14 or not c[1].isdigit():
            continue
        above, redis = float(c[9]), float(c[11])
        key = (c[0], int(c[1]))
        miss_a = key[1] >= 32 and above > 1 / 3
        miss_r = redis > (1 if key[1] == 1 else 0.5)
        cells.setdefault(key, {})[name] = f"{above:.2f}{'*' if miss_a else ''} / {redis:.2f}{'*' if miss_r else ''}"
print("| keys, callers | " + " | ".join(runs) + " |")
print("| --- |" + " --: |" * len(runs))
for key in sorted(cells, key=lambda k: (["uniform100k", "hot", "zipf1M"].index(k[0]), k[1])):
    print(f"| {key[0]}, {key[1]} | " + " | ".join(cells[key].get(r, "") for r in runs) + " |")
