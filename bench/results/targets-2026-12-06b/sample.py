import os, re, subprocess, sys, time
# usage: python3 sample.py OUT: every 0.2 s, for each redis-server started
# after this script (the benchmark's), one line of: time, pid, CPU ticks,
# voluntary and involuntary context switches, read and write system calls
# (/proc/PID/io), and INCRBY and EXPIRE calls (INFO commandstats).
out = open(sys.argv[1], "w")
def redis_pids():
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = open(f"/proc/{p}/cmdline","rb").read().split(b"\0")
            except Exception: continue
            if cmd and b"redis-server" in cmd[0]:
                pids.append(int(p))
    return pids
base = set(redis_pids())
while True:
    for pid in redis_pids():
        if pid in base: continue
        try:
            st = open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split()
            ut, stt = int(st[11]), int(st[12])
            s = open(f"/proc/{pid}/status").read()
            v = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", s, re.M).group(1))
            nv = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", s, re.M).group(1))
            io = dict(l.split(": ") for l in open(f"/proc/{pid}/io").read().split("\n") if l)
            title = open(f"/proc/{pid}/cmdline").read()
            m = re.search(r":(\d+)", title)
            port = m.group(1) if m else None
            cs = subprocess.run(["redis-cli","-p",port,"info","commandstats"],capture_output=True,text=True).stdout if port else ""
            calls = {k: int(c) for k, c in re.findall(r"cmdstat_(\w+):calls=(\d+)", cs)}
            out.write(f"{time.time():.3f} {pid} {ut+stt} {v} {nv} {io['syscr']} {io['syscw']} {calls.get('incrby',0)} {calls.get('expire',0)}\n")
            out.flush()
        except Exception as e:
            pass
    time.sleep(0.2)
