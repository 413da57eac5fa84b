import re, sys, collections
text = open(sys.argv[1]).read()
events = text.split("jdk.ExecutionSample {")[1:]
cats = collections.Counter(); threads = collections.Counter(); tops = collections.Counter(); own = collections.Counter()
RULES = [
 ("janino-compile", ["org.codehaus.janino", "org.codehaus.commons"]),
 ("codegen-gen", ["CodegenContext", "CodeGenerator", "doCodeGen", "WholeStageCodegenExec.doExecute", "GenerateUnsafeProjection", "GenerateSafeProjection", "GeneratePredicate", "GenerateOrdering"]),
 ("analyzer", ["catalyst.analysis.Analyzer", "CheckAnalysis", "QueryExecution.assertAnalyzed", "QueryExecution.analyzed"]),
 ("optimizer", ["catalyst.optimizer", "SparkOptimizer", "QueryExecution.optimizedPlan"]),
 ("planner", ["QueryPlanner", "SparkStrategies", "QueryExecution.sparkPlan", "QueryExecution.executedPlan", "EnsureRequirements", "prepareForExecution"]),
 ("arrow", ["ArrowConverters", "arrow"]),
 ("scheduler", ["scheduler.", "DAGScheduler", "TaskSetManager"]),
 ("shuffle", ["shuffle."]),
 ("serialize", ["Serializer", "ObjectOutputStream", "ObjectInputStream", "kryo"]),
 ("py4j", ["py4j"]),
]
for ev in events:
    m = re.search(r'sampledThread = "([^"]*)"', ev)
    th = m.group(1) if m else "?"
    th = re.sub(r"\d+", "N", th)[:60]
    frames = re.findall(r"^\s+([\w$.<>]+\(.*?\))\s+line:", ev, re.M)
    if not frames:
        frames = re.findall(r"^\s{4}(\S.*)$", ev.split("stackTrace = [",1)[-1], re.M)
    stack = "\n".join(frames)
    cat = "other"
    for name, keys in RULES:
        if any(k in stack for k in keys):
            cat = name; break
    cats[cat] += 1; threads[th] += 1
    if frames:
        own[frames[0].split("(")[0]] += 1
    if cat == "other" and frames:
        tops[" < ".join(f.split("(")[0].rsplit(".",2)[-2] + "." + f.split("(")[0].rsplit(".",1)[-1] for f in frames[:4])] += 1
n = sum(cats.values()); print("samples", n)
for k, v in cats.most_common(): print(f"{v:6d} {100*v/n:5.1f}% {k}")
print("--threads"); [print(f"{v:6d} {t}") for t, v in threads.most_common(12)]
print("--own (leaf) methods"); [print(f"{v:6d} {t}") for t, v in own.most_common(25)]
print("--other stacks"); [print(f"{v:6d} {t}") for t, v in tops.most_common(25)]
print("--cat by thread")
ct = collections.Counter()
for ev in events:
    m = re.search(r'sampledThread = "([^"]*)"', ev); th = re.sub(r"\d+", "N", m.group(1) if m else "?")[:30]
    frames = re.findall(r"^\s+([\w$.<>]+\(.*?\))\s+line:", ev, re.M); stack = "\n".join(frames)
    cat = "other"
    for name, keys in RULES:
        if any(k in stack for k in keys): cat = name; break
    ct[(th, cat)] += 1
for (t, c), v in sorted(ct.items(), key=lambda x: -x[1])[:30]: print(f"{v:6d} {t:32s} {c}")
