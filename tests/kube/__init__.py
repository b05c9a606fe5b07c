"""The Kubernetes backend's tests against a real kube-apiserver."""
