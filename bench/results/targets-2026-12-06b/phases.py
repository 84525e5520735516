# usage: python3 phases.py SAMPLES: sample.py's lines split into the parts
# where one service ran (INCRBY and EXPIRE together: envoyproxy/ratelimit;
# INCRBY alone: sluice), and Redis's cost a decision in each.
import sys
rows=[list(map(float,l.split())) for l in open(sys.argv[1])]
# t pid cpu(ticks) v nv syscr syscw incrby expire
prev=None; seg=[]
for r in rows:
    if prev:
        d=[a-b for a,b in zip(r,prev)]
        kind = "idle"
        if d[7]>50:
            kind = "envoy" if d[8] > 0.5*d[7] else "sluice"
        seg.append((kind,d))
    prev=r
# merge consecutive
out=[]
for k,d in seg:
    if out and out[-1][0]==k: out[-1][1]=[a+b for a,b in zip(out[-1][1],d)]
    else: out.append([k,d])
for k,d in out:
    if k=="idle" or d[7]<1000: continue
    n=d[7]
    print(f"{k:7s} {d[0]:5.1f}s decisions {n:7.0f} cpu µs/dec {d[2]*1e4/n:5.1f} vcsw/dec {d[3]/n:.2f} nvcsw/dec {d[4]/n:.3f} syscr/dec {d[5]/n:.2f} syscw/dec {d[6]/n:.2f}")
