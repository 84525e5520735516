import re,sys,glob,collections
rows=collections.defaultdict(lambda: collections.defaultdict(list))
# usage: python3 summ.py DIR PREFIX (r1 or r2): ranges of the rounds of
# base and new, alternated runs of bench/cmd/compare -only envoy
for f in sorted(glob.glob(sys.argv[1]+'/'+sys.argv[2]+'-*.err')):
    v=re.search(r'(base|new)-\d+\.err$',f)
    if not v: continue
    v=v.group(1)
    for line in open(f):
        m=re.match(r'\s+(\S+)\s+(\d+) callers, round \d+: (sluice envoy_rls|envoyproxy/ratelimit|floor \(empty handler\))\s+(\d+) decisions/s\s+CPU\s+([\d.]+) µs/decision\s+Redis\s+([\d.]+) µs/decision\s+syscalls\s+([\d.]+)/decision.*failed (\d+)',line)
        if m:
            w,c,who,d,cpu,red,sc,fail=m.groups()
            who={'sluice envoy_rls':'s','envoyproxy/ratelimit':'e'}.get(who,'f')
            rows[(w,int(c))][(v,who)].append((int(d),float(cpu),float(red),float(sc),int(fail)))
        m=re.match(r'\s+(\S+)\s+(\d+) callers, round \d+: CPU above the floor sluice ([\d.]+) µs/decision, envoy ([\d.]+): ratio ([\d.]+)',line)
        if m:
            w,c,s,e,r=m.groups()
            rows[(w,int(c))][(v,'above')].append((float(s),float(e),float(r)))
        m=re.match(r'\s+Redis commands of sluice envoy_rls:.* ([\d.]+) decisions per read',line)
def rng(xs):
    xs=sorted(xs)
    return f"{xs[0]:g}" if len(xs)==1 or xs[0]==xs[-1] else f"{xs[0]:g}–{xs[-1]:g}"
for k in sorted(rows):
    r=rows[k]
    out=[f"{k[0]} {k[1]}"]
    for v in ('base','new'):
        s=r.get((v,'s'),[]); e=r.get((v,'e'),[]); a=r.get((v,'above'),[])
        if not s: continue
        out.append(f"| {v}: dec/s {rng([x[0] for x in s])} above {rng([x[0] for x in a])} ratio {rng([x[2] for x in a])} redis {rng([x[2] for x in s])}/{rng([x[2] for x in e])} ratio {rng([round(x[2]/y[2],2) for x,y in zip(s,e)])} sc {rng([x[3] for x in s])} failed {rng([x[4] for x in s])}")
    print(' '.join(out))
