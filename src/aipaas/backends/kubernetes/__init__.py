"""The Kubernetes backend: aipaas as the scheduler and DRA allocator of a Kubernetes cluster
(pods with ``schedulerName: aipaas``, bound by Binding; ResourceClaims allocated by aipaas)."""
