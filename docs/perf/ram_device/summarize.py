"""Per point of nvmeio-tune --vs-fio runs.csv files: nvmeio's median rate and CPU per GiB, and the
medians of the per-repeat ratios to fio's default and to fio at its best (fio's CPU: its whole
process net of start-up, process_cpu_seconds_per_gib). Prints a Markdown table.
--set=NAME[,NAME...] keeps the rows of those sets of a merged file (its first column, "set":
docs/perf/ram_device/runs.csv holds every sweep of docs/perf/ram_device.md that way)."""
import csv, sys, statistics as st, collections
sets=[n for a in sys.argv[1:] if a.startswith('--set=') for n in a[6:].split(',')]
rows=[]
for f in sys.argv[1:]:
    if not f.startswith('--set='):
        rows += [r for r in csv.DictReader(open(f)) if not sets or r.get('set') in sets]
d=collections.defaultdict(lambda: collections.defaultdict(dict))
for r in rows:
    key=(r['op'], int(r['block_size']), int(r['queue_depth']))
    d[key][int(r['repeat'])][r['method']]=r
def fmt_size(b):
    return f"{b>>20}M" if b>=1<<20 else f"{b>>10}K"
print("| op | point | nvmeio GB/s | / fio | / fio best | nvmeio CPU s/GiB | / fio | / fio best |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for key in sorted(d, key=lambda k:(k[0],k[1],k[2])):
    reps=d[key]
    def med(m,f): 
        v=[float(x[m][f]) for x in reps.values() if m in x and x[m][f] not in ('',None)]
        return st.median(v) if v else float('nan')
    def ratio(m,f,g):
        v=[float(x['nvmeio'][f])/float(x[m][g]) for x in reps.values() if m in x and 'nvmeio' in x and x[m][g] not in ('','0','0.0') and float(x[m][g])>0]
        return st.median(v) if v else float('nan')
    op,b,q=key
    print(f"| {op} | {fmt_size(b)} × {q} | {med('nvmeio','gb_per_s'):.3f} | {ratio('fio','gb_per_s','gb_per_s'):.2f}× | {ratio('fio-best','gb_per_s','gb_per_s'):.2f}× | {med('nvmeio','cpu_seconds_per_gib'):.3f} | {ratio('fio','cpu_seconds_per_gib','process_cpu_seconds_per_gib'):.2f}× | {ratio('fio-best','cpu_seconds_per_gib','process_cpu_seconds_per_gib'):.2f}× |")
