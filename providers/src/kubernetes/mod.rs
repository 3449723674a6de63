//! Provider `kubernetes`: objects inside a cluster, applied with server-side apply.
