// Builds etcd 3.6 for the tests' throwaway cluster (scripts/kube_build.sh); Debian's etcd 3.4 is
// too old for kube-apiserver 1.37. go.etcd.io/etcd/server/v3 replaces its sibling modules with
// its own source tree; here each is pinned to the same published version.
module aipaas.local/etcd-build

go 1.26.0

require go.etcd.io/etcd/server/v3 v3.6.16

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.16
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 v3.6.16
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 v3.6.16
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 v3.6.16
)
