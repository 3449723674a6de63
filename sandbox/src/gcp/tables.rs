//! What the sandbox adds to the official discovery documents of the Google APIs it serves
//! with request bodies (container v1, file v1, storage v1, serviceusage v1, iam v1,
//! cloudresourcemanager v3): the proto
//! names the documents do not spell out, storage's output-only fields and prose-listed
//! enum values, and — the one list to extend when a handler learns a field — which fields
//! of each request message the handlers emulate. Every field a document defines is
//! accepted; one set to a value that is not listed here is answered as not supported by
//! the sandbox, never silently ignored. `tests/suite/discovery_fields.rs` checks every
//! entry names something the documents have.

use super::schema::Profile;

/// Every profile, by API name.
pub const PROFILES: [&Profile; 6] = [
    &CONTAINER,
    &FILE,
    &STORAGE,
    &SERVICEUSAGE,
    &IAM,
    &RESOURCEMANAGER,
];

pub static CONTAINER: Profile = Profile {
    api: "container",
    package: "google.container.v1",
    json_api: false,
    proto_names: &[
        // Messages and enums nested in another message, or shared from another package.
        (
            "UpgradeSettings",
            "google.container.v1.NodePool.UpgradeSettings",
        ),
        ("Metric", "google.container.v1.OperationProgress.Metric"),
        ("Status", "google.rpc.Status"),
        (
            "UpgradeSettings.strategy",
            "google.container.v1.NodePoolUpdateStrategy",
        ),
        (
            "GPUDriverInstallationConfig.gpuDriverVersion",
            "google.container.v1.GPUDriverInstallationConfig.GPUDriverVersion",
        ),
        (
            "Operation.operationType",
            "google.container.v1.Operation.Type",
        ),
        (
            "OperationProgress.status",
            "google.container.v1.Operation.Status",
        ),
    ],
    output_only: &[],
    enums: &[],
    emulated: &[
        (
            "CreateClusterRequest",
            &["cluster", "parent", "projectId", "zone"],
        ),
        (
            "Cluster",
            &[
                "name",
                "description",
                "initialNodeCount",
                "nodeConfig",
                "masterAuth",
                "loggingService",
                "monitoringService",
                "network",
                "clusterIpv4Cidr",
                "subnetwork",
                "nodePools",
                "locations",
                "resourceLabels",
                "labelFingerprint",
                "ipAllocationPolicy",
                "releaseChannel",
                "autopilot",
                "initialClusterVersion",
                "workloadIdentityConfig",
            ],
        ),
        ("WorkloadIdentityConfig", &["workloadPool"]),
        ("WorkloadMetadataConfig", &["mode"]),
        ("ReleaseChannel", &["channel"]),
        ("Autopilot", &["enabled"]),
        (
            "IPAllocationPolicy",
            &[
                "useIpAliases",
                "createSubnetwork",
                "clusterSecondaryRangeName",
                "servicesSecondaryRangeName",
                "clusterIpv4CidrBlock",
                "servicesIpv4CidrBlock",
            ],
        ),
        ("NodeTaint", &["key", "value", "effect"]),
        (
            "GPUDriverInstallationConfig",
            &["gpuDriverVersion", "specificVersion"],
        ),
        (
            "AcceleratorConfig",
            &[
                "acceleratorCount",
                "acceleratorType",
                "gpuPartitionSize",
                "gpuDriverInstallationConfig",
            ],
        ),
        (
            "NodeConfig",
            &[
                "machineType",
                "diskSizeGb",
                "diskType",
                "oauthScopes",
                "serviceAccount",
                "metadata",
                "imageType",
                "labels",
                "resourceLabels",
                "tags",
                "preemptible",
                "spot",
                "accelerators",
                "taints",
                "workloadMetadataConfig",
            ],
        ),
        (
            "NodePoolAutoscaling",
            &[
                "enabled",
                "minNodeCount",
                "maxNodeCount",
                "autoprovisioned",
                "locationPolicy",
                "totalMinNodeCount",
                "totalMaxNodeCount",
            ],
        ),
        ("NodeManagement", &["autoUpgrade", "autoRepair"]),
        ("PlacementPolicy", &["type", "tpuTopology", "policyName"]),
        (
            "UpgradeSettings",
            &["maxSurge", "maxUnavailable", "strategy"],
        ),
        (
            "NodePool",
            &[
                "name",
                "config",
                "initialNodeCount",
                "locations",
                "version",
                "autoscaling",
                "management",
                "placementPolicy",
                "upgradeSettings",
            ],
        ),
        (
            "UpdateClusterRequest",
            &["update", "name", "projectId", "zone", "clusterId"],
        ),
        (
            "ClusterUpdate",
            &[
                "desiredReleaseChannel",
                "desiredMasterVersion",
                "desiredNodePoolId",
                "desiredNodePoolAutoscaling",
                "desiredWorkloadIdentityConfig",
            ],
        ),
        (
            "SetLabelsRequest",
            &[
                "resourceLabels",
                "labelFingerprint",
                "name",
                "projectId",
                "zone",
                "clusterId",
            ],
        ),
        (
            "CreateNodePoolRequest",
            &["nodePool", "parent", "projectId", "zone", "clusterId"],
        ),
        (
            "UpdateNodePoolRequest",
            &[
                "nodeVersion",
                "imageType",
                "taints",
                "labels",
                "resourceLabels",
                "workloadMetadataConfig",
                // Name the resource the request path already names.
                "name",
                "projectId",
                "zone",
                "clusterId",
                "nodePoolId",
            ],
        ),
        ("NodeTaints", &["taints"]),
        ("NodeLabels", &["labels"]),
        ("ResourceLabels", &["labels"]),
        (
            "SetNodePoolAutoscalingRequest",
            &[
                "autoscaling",
                // Name the resource the request path already names.
                "name",
                "projectId",
                "zone",
                "clusterId",
                "nodePoolId",
            ],
        ),
        (
            "SetNodePoolSizeRequest",
            &[
                "nodeCount",
                // Name the resource the request path already names.
                "name",
                "projectId",
                "zone",
                "clusterId",
                "nodePoolId",
            ],
        ),
        (
            "SetNodePoolManagementRequest",
            &[
                "management",
                // Name the resource the request path already names.
                "name",
                "projectId",
                "zone",
                "clusterId",
                "nodePoolId",
            ],
        ),
    ],
};

pub static FILE: Profile = Profile {
    api: "file",
    package: "google.cloud.filestore.v1",
    json_api: false,
    proto_names: &[
        ("Operation", "google.longrunning.Operation"),
        (
            "ListOperationsResponse",
            "google.longrunning.ListOperationsResponse",
        ),
        ("Status", "google.rpc.Status"),
        ("OperationMetadata", "google.cloud.common.OperationMetadata"),
        (
            "Instance.protocol",
            "google.cloud.filestore.v1.Instance.FileProtocol",
        ),
        (
            "NetworkConfig.modes",
            "google.cloud.filestore.v1.NetworkConfig.AddressMode",
        ),
    ],
    output_only: &[],
    enums: &[],
    emulated: &[
        (
            "Instance",
            &[
                "description",
                "tier",
                "labels",
                "fileShares",
                "networks",
                "protocol",
                "etag",
            ],
        ),
        (
            "FileShareConfig",
            &["name", "capacityGb", "nfsExportOptions"],
        ),
        (
            "NfsExportOptions",
            &["ipRanges", "accessMode", "squashMode", "anonUid", "anonGid"],
        ),
        (
            "NetworkConfig",
            &["network", "modes", "reservedIpRange", "connectMode"],
        ),
    ],
};

pub static STORAGE: Profile = Profile {
    api: "storage",
    package: "storage.v1",
    json_api: true,
    proto_names: &[],
    // The JSON API's document marks nothing read-only; these are the fields GCS sets
    // itself and ignores in requests.
    output_only: &[
        "Bucket.kind",
        "Bucket.id",
        "Bucket.selfLink",
        "Bucket.projectNumber",
        "Bucket.timeCreated",
        "Bucket.updated",
        "Bucket.metageneration",
        "Bucket.locationType",
        "Bucket.etag",
        "Bucket.iamConfiguration.uniformBucketLevelAccess.lockedTime",
        "Bucket.iamConfiguration.bucketPolicyOnly.lockedTime",
        "Object.kind",
        "Object.id",
        "Object.selfLink",
        "Object.mediaLink",
        "Object.bucket",
        "Object.generation",
        "Object.metageneration",
        "Object.storageClass",
        "Object.size",
        "Object.crc32c",
        "Object.etag",
        "Object.timeCreated",
        "Object.updated",
        "Object.timeDeleted",
        "Object.timeStorageClassUpdated",
    ],
    // The JSON API's "enums" are plain strings whose values the field descriptions list.
    enums: &[
        (
            "Bucket.storageClass",
            &[
                "STANDARD",
                "NEARLINE",
                "COLDLINE",
                "ARCHIVE",
                "MULTI_REGIONAL",
                "REGIONAL",
                "DURABLE_REDUCED_AVAILABILITY",
            ],
        ),
        (
            "Bucket.iamConfiguration.publicAccessPrevention",
            &["inherited", "enforced"],
        ),
    ],
    emulated: &[
        (
            "Bucket",
            &[
                "name",
                "location",
                "storageClass",
                "versioning",
                "iamConfiguration",
                "labels",
            ],
        ),
        ("Bucket.versioning", &["enabled"]),
        (
            "Bucket.iamConfiguration",
            &[
                "uniformBucketLevelAccess",
                // The former name of uniformBucketLevelAccess; GCS still mirrors it.
                "bucketPolicyOnly",
                "publicAccessPrevention",
            ],
        ),
        (
            "Bucket.iamConfiguration.uniformBucketLevelAccess",
            &["enabled"],
        ),
        ("Bucket.iamConfiguration.bucketPolicyOnly", &["enabled"]),
        (
            "Policy",
            &["bindings", "etag", "version", "kind", "resourceId"],
        ),
        ("Policy.bindings", &["role", "members", "condition"]),
        ("Expr", &["expression", "title", "description"]),
    ],
};

pub static SERVICEUSAGE: Profile = Profile {
    api: "serviceusage",
    package: "google.api.serviceusage.v1",
    json_api: false,
    proto_names: &[
        ("Operation", "google.longrunning.Operation"),
        ("Status", "google.rpc.Status"),
    ],
    output_only: &[],
    enums: &[],
    emulated: &[(
        "DisableServiceRequest",
        // Disabling Compute Engine under Kubernetes Engine needs the cascade; the
        // sandbox records no usage, so the usage check never has anything to refuse.
        &["disableDependentServices", "checkIfServiceHasUsage"],
    )],
};

pub static IAM: Profile = Profile {
    api: "iam",
    package: "google.iam.admin.v1",
    json_api: false,
    proto_names: &[
        ("Policy", "google.iam.v1.Policy"),
        ("Binding", "google.iam.v1.Binding"),
        ("Expr", "google.type.Expr"),
        ("SetIamPolicyRequest", "google.iam.v1.SetIamPolicyRequest"),
    ],
    output_only: &[],
    enums: &[],
    emulated: &[
        (
            "CreateServiceAccountRequest",
            &["accountId", "serviceAccount"],
        ),
        (
            "ServiceAccount",
            // What the service account's read gave back may be sent whole.
            &[
                "displayName",
                "description",
                "name",
                "projectId",
                "uniqueId",
                "email",
                "etag",
                "oauth2ClientId",
            ],
        ),
        (
            "PatchServiceAccountRequest",
            &["serviceAccount", "updateMask"],
        ),
        ("SetIamPolicyRequest", &["policy", "updateMask"]),
        ("Policy", &["bindings", "etag", "version"]),
        ("Binding", &["role", "members", "condition"]),
        ("Expr", &["expression", "title", "description"]),
    ],
};

pub static RESOURCEMANAGER: Profile = Profile {
    api: "cloudresourcemanager",
    package: "google.cloud.resourcemanager.v3",
    json_api: false,
    proto_names: &[
        ("Policy", "google.iam.v1.Policy"),
        ("Binding", "google.iam.v1.Binding"),
        ("Expr", "google.type.Expr"),
        ("SetIamPolicyRequest", "google.iam.v1.SetIamPolicyRequest"),
        ("GetIamPolicyRequest", "google.iam.v1.GetIamPolicyRequest"),
        ("GetPolicyOptions", "google.iam.v1.GetPolicyOptions"),
    ],
    output_only: &[],
    enums: &[],
    emulated: &[
        ("GetIamPolicyRequest", &["options"]),
        ("GetPolicyOptions", &["requestedPolicyVersion"]),
        ("SetIamPolicyRequest", &["policy", "updateMask"]),
        ("Policy", &["bindings", "etag", "version"]),
        ("Binding", &["role", "members", "condition"]),
        ("Expr", &["expression", "title", "description"]),
    ],
};
