#!/usr/bin/env bash
# usage: ORDER="2 0 1" stampsum.sh BIN "shape k q" ...   (a bench_search built with -DVARIANT_STAMPS)
B=$1; shift
for row in "$@"; do read -r s k q <<< "$row"
  $B/bench_search --shapes $s --k $k --q $q --reps 300 --sets 1 > /tmp/st.log 2>&1
  grep -v STAMP /tmp/st.log | tail -1
  grep "^STAMP" /tmp/st.log | ORDER="$ORDER" python3 -c "
import sys,os,statistics as st,collections
d=collections.defaultdict(dict)
for l in sys.stdin:
  _,tag,i,b,e=l.split(); d[int(tag)][int(i)]=(int(b),int(e))
order=[int(t) for t in os.environ.get('ORDER','').split()] or sorted(d)
order=[t for t in order if t in d]
n=min(len(d[t]) for t in order)
rows=collections.defaultdict(list)
for i in range(1,n):
  if any(i not in d[t] for t in order) or i-1 not in d[order[-1]]: continue
  prev=None
  for t in order:
    b,e=d[t][i]
    if prev is not None: rows['gap %d->%d'%(prev,t)].append((b-d[prev][i][1])/1e3)
    rows['kernel %d'%t].append((e-b)/1e3); prev=t
  rows['span'].append((d[order[-1]][i][1]-d[order[0]][i][0])/1e3)
  rows['prev end->start'].append((d[order[0]][i][0]-d[order[-1]][i-1][1])/1e3)
for name,v in rows.items():
  v=sorted(v); print('   %-16s median %8.1f  p10 %8.1f  p90 %8.1f  (n=%d)' % (name,v[len(v)//2],v[len(v)//10],v[9*len(v)//10],len(v)))
"
done
