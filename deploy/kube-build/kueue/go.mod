// Builds Kueue for benchmarks/kube_side_by_side.py's "kube-scheduler + Kueue" rows
// (scripts/kueue_build.sh). Kueue's own go.mod has no replace directives, so requiring the
// published module is enough.
module aipaas.local/kueue-build

go 1.26.0

require sigs.k8s.io/kueue v0.17.0
