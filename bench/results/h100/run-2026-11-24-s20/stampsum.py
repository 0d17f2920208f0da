import sys,re,statistics,collections
rows=collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith('#####'): cur=line.strip(); continue
    if 'STAMPS' not in line: continue
    kv=dict(re.findall(r'(\w+)=(\d+)',line))
    rows[cur].append(kv)
for name,r in rows.items():
    print(name, 'launches',len(r))
    keys=r[0].keys()
    print('  '+' '.join(f"{k}={statistics.median(int(x[k]) for x in r):.0f}" for k in keys))
