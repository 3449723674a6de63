//! The field tables of every Google message the sandbox accepts or returns: the subset of
//! container v1, file v1 and storage v1 that terrain and gcloud use. Names, types and enum
//! spellings come from the official discovery documents (`contracts/gcp/`), and
//! `tests/suite/field_tables.rs` re-checks every entry against them so the tables cannot drift.
//! A field missing here is rejected as unknown; add it here (and only here) to accept it.

use super::schema::{EnumType, Field, Kind, Message};

/// A root message of one API, as checked against its discovery document.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// `container`, `file` or `storage`.
    pub api: &'static str,
    pub message: &'static Message,
}

/// Every root message, for the contract test.
pub fn all() -> Vec<Table> {
    let container: &[&'static Message] = &[
        &CLUSTER,
        &CREATE_CLUSTER_REQUEST,
        &UPDATE_CLUSTER_REQUEST,
        &SET_LABELS_REQUEST,
        &CREATE_NODE_POOL_REQUEST,
        &UPDATE_NODE_POOL_REQUEST,
        &SET_NODE_POOL_AUTOSCALING_REQUEST,
        &SET_NODE_POOL_SIZE_REQUEST,
        &SET_NODE_POOL_MANAGEMENT_REQUEST,
        &CONTAINER_OPERATION,
        &LIST_CLUSTERS_RESPONSE,
        &LIST_NODE_POOLS_RESPONSE,
        &CONTAINER_LIST_OPERATIONS_RESPONSE,
    ];
    let file: &[&'static Message] = &[
        &INSTANCE,
        &FILE_OPERATION,
        &FILE_OPERATION_METADATA,
        &LIST_INSTANCES_RESPONSE,
        &FILE_LIST_OPERATIONS_RESPONSE,
    ];
    let storage: &[&'static Message] = &[&BUCKET, &OBJECT, &BUCKETS, &OBJECTS];
    let mut out = Vec::new();
    for (api, messages) in [
        ("container", container),
        ("file", file),
        ("storage", storage),
    ] {
        out.extend(messages.iter().map(|&message| Table { api, message }));
    }
    out
}

use Kind::{Bool, Int32, Int64, String as Str, StringMap};

const fn msg(m: &'static Message) -> Kind {
    Kind::Message(m)
}

const fn enm(e: &'static EnumType) -> Kind {
    Kind::Enum(e)
}

const fn f(name: &'static str, kind: Kind) -> Field {
    Field::new(name, kind)
}

// ---------------------------------------------------------------- container v1

pub static RELEASE_CHANNEL_CHANNEL: EnumType = EnumType {
    proto: "google.container.v1.ReleaseChannel.Channel",
    values: &["UNSPECIFIED", "RAPID", "REGULAR", "STABLE", "EXTENDED"],
};
pub static NODE_TAINT_EFFECT: EnumType = EnumType {
    proto: "google.container.v1.NodeTaint.Effect",
    values: &[
        "EFFECT_UNSPECIFIED",
        "NO_SCHEDULE",
        "PREFER_NO_SCHEDULE",
        "NO_EXECUTE",
    ],
};
pub static GPU_DRIVER_VERSION: EnumType = EnumType {
    proto: "google.container.v1.GPUDriverInstallationConfig.GPUDriverVersion",
    values: &[
        "GPU_DRIVER_VERSION_UNSPECIFIED",
        "INSTALLATION_DISABLED",
        "DEFAULT",
        "LATEST",
        "SPECIFIC",
    ],
};
pub static LOCATION_POLICY: EnumType = EnumType {
    proto: "google.container.v1.NodePoolAutoscaling.LocationPolicy",
    values: &["LOCATION_POLICY_UNSPECIFIED", "BALANCED", "ANY"],
};
pub static PLACEMENT_POLICY_TYPE: EnumType = EnumType {
    proto: "google.container.v1.PlacementPolicy.Type",
    values: &["TYPE_UNSPECIFIED", "COMPACT"],
};
pub static CLUSTER_STATUS: EnumType = EnumType {
    proto: "google.container.v1.Cluster.Status",
    values: &[
        "STATUS_UNSPECIFIED",
        "PROVISIONING",
        "RUNNING",
        "RECONCILING",
        "STOPPING",
        "ERROR",
        "DEGRADED",
    ],
};
pub static NODE_POOL_STATUS: EnumType = EnumType {
    proto: "google.container.v1.NodePool.Status",
    values: &[
        "STATUS_UNSPECIFIED",
        "PROVISIONING",
        "RUNNING",
        "RUNNING_WITH_ERROR",
        "RECONCILING",
        "STOPPING",
        "ERROR",
    ],
};
pub static OPERATION_TYPE: EnumType = EnumType {
    proto: "google.container.v1.Operation.Type",
    values: &[
        "TYPE_UNSPECIFIED",
        "CREATE_CLUSTER",
        "DELETE_CLUSTER",
        "UPGRADE_MASTER",
        "UPGRADE_NODES",
        "REPAIR_CLUSTER",
        "UPDATE_CLUSTER",
        "CREATE_NODE_POOL",
        "DELETE_NODE_POOL",
        "SET_NODE_POOL_MANAGEMENT",
        "AUTO_REPAIR_NODES",
        "AUTO_UPGRADE_NODES",
        "SET_LABELS",
        "SET_MASTER_AUTH",
        "SET_NODE_POOL_SIZE",
        "SET_NETWORK_POLICY",
        "SET_MAINTENANCE_POLICY",
        "RESIZE_CLUSTER",
        "FLEET_FEATURE_UPGRADE",
    ],
};
pub static OPERATION_STATUS: EnumType = EnumType {
    proto: "google.container.v1.Operation.Status",
    values: &[
        "STATUS_UNSPECIFIED",
        "PENDING",
        "RUNNING",
        "DONE",
        "ABORTING",
    ],
};

pub static RELEASE_CHANNEL: Message = Message {
    name: "ReleaseChannel",
    proto: "google.container.v1.ReleaseChannel",
    fields: &[f("channel", enm(&RELEASE_CHANNEL_CHANNEL))],
};
pub static AUTOPILOT: Message = Message {
    name: "Autopilot",
    proto: "google.container.v1.Autopilot",
    fields: &[f("enabled", Bool)],
};
pub static IP_ALLOCATION_POLICY: Message = Message {
    name: "IPAllocationPolicy",
    proto: "google.container.v1.IPAllocationPolicy",
    fields: &[
        f("useIpAliases", Bool),
        f("createSubnetwork", Bool),
        f("clusterSecondaryRangeName", Str),
        f("servicesSecondaryRangeName", Str),
        f("clusterIpv4CidrBlock", Str),
        f("servicesIpv4CidrBlock", Str),
    ],
};
pub static MASTER_AUTH: Message = Message {
    name: "MasterAuth",
    proto: "google.container.v1.MasterAuth",
    fields: &[f("clusterCaCertificate", Str).output()],
};
pub static NODE_TAINT: Message = Message {
    name: "NodeTaint",
    proto: "google.container.v1.NodeTaint",
    fields: &[
        f("key", Str),
        f("value", Str),
        f("effect", enm(&NODE_TAINT_EFFECT)),
    ],
};
pub static GPU_DRIVER_INSTALLATION_CONFIG: Message = Message {
    name: "GPUDriverInstallationConfig",
    proto: "google.container.v1.GPUDriverInstallationConfig",
    fields: &[
        f("gpuDriverVersion", enm(&GPU_DRIVER_VERSION)),
        f("specificVersion", Str),
    ],
};
pub static ACCELERATOR_CONFIG: Message = Message {
    name: "AcceleratorConfig",
    proto: "google.container.v1.AcceleratorConfig",
    fields: &[
        f("acceleratorCount", Int64),
        f("acceleratorType", Str),
        f("gpuPartitionSize", Str),
        f(
            "gpuDriverInstallationConfig",
            msg(&GPU_DRIVER_INSTALLATION_CONFIG),
        ),
    ],
};
pub static NODE_CONFIG: Message = Message {
    name: "NodeConfig",
    proto: "google.container.v1.NodeConfig",
    fields: &[
        f("machineType", Str),
        f("diskSizeGb", Int32),
        f("diskType", Str),
        f("oauthScopes", Str).list(),
        f("serviceAccount", Str),
        f("metadata", StringMap),
        f("imageType", Str),
        f("labels", StringMap),
        f("resourceLabels", StringMap),
        f("tags", Str).list(),
        f("preemptible", Bool),
        f("spot", Bool),
        f("accelerators", msg(&ACCELERATOR_CONFIG)).list(),
        f("taints", msg(&NODE_TAINT)).list(),
    ],
};
pub static NODE_POOL_AUTOSCALING: Message = Message {
    name: "NodePoolAutoscaling",
    proto: "google.container.v1.NodePoolAutoscaling",
    fields: &[
        f("enabled", Bool),
        f("minNodeCount", Int32),
        f("maxNodeCount", Int32),
        f("autoprovisioned", Bool),
        f("locationPolicy", enm(&LOCATION_POLICY)),
        f("totalMinNodeCount", Int32),
        f("totalMaxNodeCount", Int32),
    ],
};
pub static NODE_MANAGEMENT: Message = Message {
    name: "NodeManagement",
    proto: "google.container.v1.NodeManagement",
    fields: &[f("autoUpgrade", Bool), f("autoRepair", Bool)],
};
pub static PLACEMENT_POLICY: Message = Message {
    name: "PlacementPolicy",
    proto: "google.container.v1.PlacementPolicy",
    fields: &[
        f("type", enm(&PLACEMENT_POLICY_TYPE)),
        f("tpuTopology", Str),
        f("policyName", Str),
    ],
};
pub static UPGRADE_STRATEGY: EnumType = EnumType {
    proto: "google.container.v1.NodePoolUpdateStrategy",
    values: &[
        "NODE_POOL_UPDATE_STRATEGY_UNSPECIFIED",
        "BLUE_GREEN",
        "SURGE",
        "SHORT_LIVED",
    ],
};
pub static UPGRADE_SETTINGS: Message = Message {
    name: "UpgradeSettings",
    proto: "google.container.v1.NodePool.UpgradeSettings",
    fields: &[
        f("maxSurge", Int32),
        f("maxUnavailable", Int32),
        f("strategy", enm(&UPGRADE_STRATEGY)),
    ],
};
pub static NODE_POOL: Message = Message {
    name: "NodePool",
    proto: "google.container.v1.NodePool",
    fields: &[
        f("name", Str),
        f("config", msg(&NODE_CONFIG)),
        f("initialNodeCount", Int32),
        f("locations", Str).list(),
        f("selfLink", Str).output(),
        f("version", Str),
        f("instanceGroupUrls", Str).list().output(),
        f("status", enm(&NODE_POOL_STATUS)).output(),
        f("statusMessage", Str).output(),
        f("autoscaling", msg(&NODE_POOL_AUTOSCALING)),
        f("management", msg(&NODE_MANAGEMENT)),
        f("placementPolicy", msg(&PLACEMENT_POLICY)),
        f("upgradeSettings", msg(&UPGRADE_SETTINGS)),
        f("podIpv4CidrSize", Int32).output(),
        f("etag", Str).output(),
    ],
};
pub static CLUSTER: Message = Message {
    name: "Cluster",
    proto: "google.container.v1.Cluster",
    fields: &[
        f("name", Str),
        f("description", Str),
        f("initialNodeCount", Int32),
        f("nodeConfig", msg(&NODE_CONFIG)),
        f("masterAuth", msg(&MASTER_AUTH)),
        f("loggingService", Str),
        f("monitoringService", Str),
        f("network", Str),
        f("clusterIpv4Cidr", Str),
        f("subnetwork", Str),
        f("nodePools", msg(&NODE_POOL)).list(),
        f("locations", Str).list(),
        f("resourceLabels", StringMap),
        f("labelFingerprint", Str),
        f("ipAllocationPolicy", msg(&IP_ALLOCATION_POLICY)),
        f("releaseChannel", msg(&RELEASE_CHANNEL)),
        f("autopilot", msg(&AUTOPILOT)),
        f("initialClusterVersion", Str),
        f("selfLink", Str).output(),
        f("zone", Str).output(),
        f("endpoint", Str).output(),
        f("currentMasterVersion", Str).output(),
        f("currentNodeVersion", Str).output(),
        f("createTime", Str).output(),
        f("status", enm(&CLUSTER_STATUS)).output(),
        f("statusMessage", Str).output(),
        f("nodeIpv4CidrSize", Int32).output(),
        f("servicesIpv4Cidr", Str).output(),
        f("currentNodeCount", Int32).output(),
        f("location", Str).output(),
        f("id", Str).output(),
    ],
};
pub static CREATE_CLUSTER_REQUEST: Message = Message {
    name: "CreateClusterRequest",
    proto: "google.container.v1.CreateClusterRequest",
    fields: &[
        f("cluster", msg(&CLUSTER)),
        f("parent", Str),
        f("projectId", Str),
        f("zone", Str),
    ],
};
pub static CLUSTER_UPDATE: Message = Message {
    name: "ClusterUpdate",
    proto: "google.container.v1.ClusterUpdate",
    // Only the updates the sandbox performs; any other desired* field is rejected as
    // unknown rather than silently ignored.
    fields: &[
        f("desiredReleaseChannel", msg(&RELEASE_CHANNEL)),
        f("desiredMasterVersion", Str),
    ],
};
pub static UPDATE_CLUSTER_REQUEST: Message = Message {
    name: "UpdateClusterRequest",
    proto: "google.container.v1.UpdateClusterRequest",
    fields: &[
        f("update", msg(&CLUSTER_UPDATE)),
        f("name", Str),
        f("projectId", Str),
        f("zone", Str),
        f("clusterId", Str),
    ],
};
pub static SET_LABELS_REQUEST: Message = Message {
    name: "SetLabelsRequest",
    proto: "google.container.v1.SetLabelsRequest",
    fields: &[
        f("resourceLabels", StringMap),
        f("labelFingerprint", Str),
        f("name", Str),
        f("projectId", Str),
        f("zone", Str),
        f("clusterId", Str),
    ],
};
pub static CREATE_NODE_POOL_REQUEST: Message = Message {
    name: "CreateNodePoolRequest",
    proto: "google.container.v1.CreateNodePoolRequest",
    fields: &[
        f("nodePool", msg(&NODE_POOL)),
        f("parent", Str),
        f("projectId", Str),
        f("zone", Str),
        f("clusterId", Str),
    ],
};
pub static NODE_TAINTS: Message = Message {
    name: "NodeTaints",
    proto: "google.container.v1.NodeTaints",
    fields: &[f("taints", msg(&NODE_TAINT)).list()],
};
pub static NODE_LABELS: Message = Message {
    name: "NodeLabels",
    proto: "google.container.v1.NodeLabels",
    fields: &[f("labels", StringMap)],
};
pub static RESOURCE_LABELS: Message = Message {
    name: "ResourceLabels",
    proto: "google.container.v1.ResourceLabels",
    fields: &[f("labels", StringMap)],
};
pub static UPDATE_NODE_POOL_REQUEST: Message = Message {
    name: "UpdateNodePoolRequest",
    proto: "google.container.v1.UpdateNodePoolRequest",
    fields: &[
        f("nodeVersion", Str),
        f("imageType", Str),
        f("taints", msg(&NODE_TAINTS)),
        f("labels", msg(&NODE_LABELS)),
        f("resourceLabels", msg(&RESOURCE_LABELS)),
        f("name", Str),
        f("projectId", Str),
        f("zone", Str),
        f("clusterId", Str),
        f("nodePoolId", Str),
    ],
};
pub static SET_NODE_POOL_AUTOSCALING_REQUEST: Message = Message {
    name: "SetNodePoolAutoscalingRequest",
    proto: "google.container.v1.SetNodePoolAutoscalingRequest",
    fields: &[
        f("autoscaling", msg(&NODE_POOL_AUTOSCALING)),
        f("name", Str),
        f("projectId", Str),
        f("zone", Str),
        f("clusterId", Str),
        f("nodePoolId", Str),
    ],
};
pub static SET_NODE_POOL_SIZE_REQUEST: Message = Message {
    name: "SetNodePoolSizeRequest",
    proto: "google.container.v1.SetNodePoolSizeRequest",
    fields: &[
        f("nodeCount", Int32),
        f("name", Str),
        f("projectId", Str),
        f("zone", Str),
        f("clusterId", Str),
        f("nodePoolId", Str),
    ],
};
pub static SET_NODE_POOL_MANAGEMENT_REQUEST: Message = Message {
    name: "SetNodePoolManagementRequest",
    proto: "google.container.v1.SetNodePoolManagementRequest",
    fields: &[
        f("management", msg(&NODE_MANAGEMENT)),
        f("name", Str),
        f("projectId", Str),
        f("zone", Str),
        f("clusterId", Str),
        f("nodePoolId", Str),
    ],
};
pub static METRIC: Message = Message {
    name: "Metric",
    proto: "google.container.v1.OperationProgress.Metric",
    fields: &[f("name", Str), f("intValue", Int64), f("stringValue", Str)],
};
pub static OPERATION_PROGRESS: Message = Message {
    name: "OperationProgress",
    proto: "google.container.v1.OperationProgress",
    fields: &[
        f("name", Str),
        f("status", enm(&OPERATION_STATUS)),
        f("metrics", msg(&METRIC)).list(),
        f("stages", msg(&OPERATION_PROGRESS)).list(),
    ],
};
pub static CONTAINER_STATUS: Message = Message {
    name: "Status",
    proto: "google.rpc.Status",
    fields: &[
        f("code", Int32),
        f("message", Str),
        f("details", Kind::Any).list(),
    ],
};
pub static CONTAINER_OPERATION: Message = Message {
    name: "Operation",
    proto: "google.container.v1.Operation",
    fields: &[
        f("name", Str).output(),
        f("zone", Str).output(),
        f("operationType", enm(&OPERATION_TYPE)).output(),
        f("status", enm(&OPERATION_STATUS)).output(),
        f("detail", Str).output(),
        f("statusMessage", Str).output(),
        f("selfLink", Str).output(),
        f("targetLink", Str).output(),
        f("location", Str).output(),
        f("startTime", Str).output(),
        f("endTime", Str).output(),
        f("progress", msg(&OPERATION_PROGRESS)).output(),
        f("error", msg(&CONTAINER_STATUS)),
    ],
};
pub static LIST_CLUSTERS_RESPONSE: Message = Message {
    name: "ListClustersResponse",
    proto: "google.container.v1.ListClustersResponse",
    fields: &[
        f("clusters", msg(&CLUSTER)).list(),
        f("missingZones", Str).list(),
    ],
};
pub static LIST_NODE_POOLS_RESPONSE: Message = Message {
    name: "ListNodePoolsResponse",
    proto: "google.container.v1.ListNodePoolsResponse",
    fields: &[f("nodePools", msg(&NODE_POOL)).list()],
};
pub static CONTAINER_LIST_OPERATIONS_RESPONSE: Message = Message {
    name: "ListOperationsResponse",
    proto: "google.container.v1.ListOperationsResponse",
    fields: &[
        f("operations", msg(&CONTAINER_OPERATION)).list(),
        f("missingZones", Str).list(),
    ],
};

// ---------------------------------------------------------------- file v1

pub static INSTANCE_TIER: EnumType = EnumType {
    proto: "google.cloud.filestore.v1.Instance.Tier",
    values: &[
        "TIER_UNSPECIFIED",
        "STANDARD",
        "PREMIUM",
        "BASIC_HDD",
        "BASIC_SSD",
        "HIGH_SCALE_SSD",
        "ENTERPRISE",
        "ZONAL",
        "REGIONAL",
    ],
};
pub static INSTANCE_STATE: EnumType = EnumType {
    proto: "google.cloud.filestore.v1.Instance.State",
    values: &[
        "STATE_UNSPECIFIED",
        "CREATING",
        "READY",
        "REPAIRING",
        "DELETING",
        "ERROR",
        "RESTORING",
        "SUSPENDED",
        "SUSPENDING",
        "RESUMING",
        "REVERTING",
        "PROMOTING",
    ],
};
pub static FILE_PROTOCOL: EnumType = EnumType {
    proto: "google.cloud.filestore.v1.Instance.FileProtocol",
    values: &["FILE_PROTOCOL_UNSPECIFIED", "NFS_V3", "NFS_V4_1"],
};
pub static ADDRESS_MODE: EnumType = EnumType {
    proto: "google.cloud.filestore.v1.NetworkConfig.AddressMode",
    values: &["ADDRESS_MODE_UNSPECIFIED", "MODE_IPV4", "MODE_IPV6"],
};
pub static CONNECT_MODE: EnumType = EnumType {
    proto: "google.cloud.filestore.v1.NetworkConfig.ConnectMode",
    values: &[
        "CONNECT_MODE_UNSPECIFIED",
        "DIRECT_PEERING",
        "PRIVATE_SERVICE_ACCESS",
        "PRIVATE_SERVICE_CONNECT",
    ],
};
pub static ACCESS_MODE: EnumType = EnumType {
    proto: "google.cloud.filestore.v1.NfsExportOptions.AccessMode",
    values: &["ACCESS_MODE_UNSPECIFIED", "READ_ONLY", "READ_WRITE"],
};
pub static SQUASH_MODE: EnumType = EnumType {
    proto: "google.cloud.filestore.v1.NfsExportOptions.SquashMode",
    values: &["SQUASH_MODE_UNSPECIFIED", "NO_ROOT_SQUASH", "ROOT_SQUASH"],
};

pub static NFS_EXPORT_OPTIONS: Message = Message {
    name: "NfsExportOptions",
    proto: "google.cloud.filestore.v1.NfsExportOptions",
    fields: &[
        f("ipRanges", Str).list(),
        f("accessMode", enm(&ACCESS_MODE)),
        f("squashMode", enm(&SQUASH_MODE)),
        f("anonUid", Int64),
        f("anonGid", Int64),
    ],
};
pub static FILE_SHARE_CONFIG: Message = Message {
    name: "FileShareConfig",
    proto: "google.cloud.filestore.v1.FileShareConfig",
    fields: &[
        f("name", Str),
        f("capacityGb", Int64),
        f("nfsExportOptions", msg(&NFS_EXPORT_OPTIONS)).list(),
    ],
};
pub static NETWORK_CONFIG: Message = Message {
    name: "NetworkConfig",
    proto: "google.cloud.filestore.v1.NetworkConfig",
    fields: &[
        f("network", Str),
        f("modes", enm(&ADDRESS_MODE)).list(),
        f("reservedIpRange", Str),
        f("ipAddresses", Str).list().output(),
        f("connectMode", enm(&CONNECT_MODE)),
    ],
};
pub static INSTANCE: Message = Message {
    name: "Instance",
    proto: "google.cloud.filestore.v1.Instance",
    fields: &[
        f("name", Str).output(),
        f("description", Str),
        f("state", enm(&INSTANCE_STATE)).output(),
        f("statusMessage", Str).output(),
        f("createTime", Str).output(),
        f("tier", enm(&INSTANCE_TIER)),
        f("labels", StringMap),
        f("fileShares", msg(&FILE_SHARE_CONFIG)).list(),
        f("networks", msg(&NETWORK_CONFIG)).list(),
        f("protocol", enm(&FILE_PROTOCOL)),
        f("etag", Str),
    ],
};
pub static FILE_STATUS: Message = Message {
    name: "Status",
    proto: "google.rpc.Status",
    fields: &[
        f("code", Int32),
        f("message", Str),
        f("details", Kind::Any).list(),
    ],
};
pub static FILE_OPERATION: Message = Message {
    name: "Operation",
    proto: "google.longrunning.Operation",
    fields: &[
        f("name", Str),
        f("metadata", Kind::Any),
        f("done", Bool),
        f("error", msg(&FILE_STATUS)),
        f("response", Kind::Any),
    ],
};
pub static FILE_OPERATION_METADATA: Message = Message {
    name: "OperationMetadata",
    proto: "google.cloud.common.OperationMetadata",
    fields: &[
        f("createTime", Str).output(),
        f("endTime", Str).output(),
        f("target", Str).output(),
        f("verb", Str).output(),
        f("statusDetail", Str).output(),
        f("cancelRequested", Bool).output(),
        f("apiVersion", Str).output(),
    ],
};
pub static LIST_INSTANCES_RESPONSE: Message = Message {
    name: "ListInstancesResponse",
    proto: "google.cloud.filestore.v1.ListInstancesResponse",
    fields: &[
        f("instances", msg(&INSTANCE)).list(),
        f("nextPageToken", Str),
        f("unreachable", Str).list(),
    ],
};
pub static FILE_LIST_OPERATIONS_RESPONSE: Message = Message {
    name: "ListOperationsResponse",
    proto: "google.longrunning.ListOperationsResponse",
    fields: &[
        f("operations", msg(&FILE_OPERATION)).list(),
        f("nextPageToken", Str),
        f("unreachable", Str).list(),
    ],
};

// ---------------------------------------------------------------- storage v1
//
// Storage's discovery document is not generated from protos: its nested objects are
// inline, so these messages are named by their path, and its "enums" are plain strings
// whose values are listed in the field description (the contract test checks that).

pub static STORAGE_CLASS: EnumType = EnumType {
    proto: "storage.v1.Bucket.storageClass",
    values: &[
        "STANDARD",
        "NEARLINE",
        "COLDLINE",
        "ARCHIVE",
        "MULTI_REGIONAL",
        "REGIONAL",
        "DURABLE_REDUCED_AVAILABILITY",
    ],
};
pub static PUBLIC_ACCESS_PREVENTION: EnumType = EnumType {
    proto: "storage.v1.Bucket.iamConfiguration.publicAccessPrevention",
    values: &["inherited", "enforced"],
};

pub static BUCKET_VERSIONING: Message = Message {
    name: "Bucket.versioning",
    proto: "storage.v1.Bucket.versioning",
    fields: &[f("enabled", Bool)],
};
pub static UNIFORM_BUCKET_LEVEL_ACCESS: Message = Message {
    name: "Bucket.iamConfiguration.uniformBucketLevelAccess",
    proto: "storage.v1.Bucket.iamConfiguration.uniformBucketLevelAccess",
    fields: &[f("enabled", Bool), f("lockedTime", Str).output()],
};
pub static BUCKET_IAM_CONFIGURATION: Message = Message {
    name: "Bucket.iamConfiguration",
    proto: "storage.v1.Bucket.iamConfiguration",
    fields: &[
        f(
            "uniformBucketLevelAccess",
            msg(&UNIFORM_BUCKET_LEVEL_ACCESS),
        ),
        // The former name of uniformBucketLevelAccess; GCS still mirrors it.
        f("bucketPolicyOnly", msg(&UNIFORM_BUCKET_LEVEL_ACCESS)),
        f("publicAccessPrevention", enm(&PUBLIC_ACCESS_PREVENTION)),
    ],
};
pub static BUCKET: Message = Message {
    name: "Bucket",
    proto: "storage.v1.Bucket",
    fields: &[
        f("kind", Str).output(),
        f("id", Str).output(),
        f("selfLink", Str).output(),
        f("projectNumber", Int64).output(),
        f("name", Str),
        f("timeCreated", Str).output(),
        f("updated", Str).output(),
        f("metageneration", Int64).output(),
        f("location", Str),
        f("locationType", Str).output(),
        f("storageClass", enm(&STORAGE_CLASS)),
        f("etag", Str).output(),
        f("versioning", msg(&BUCKET_VERSIONING)),
        f("iamConfiguration", msg(&BUCKET_IAM_CONFIGURATION)),
        f("labels", StringMap),
    ],
};
pub static OBJECT: Message = Message {
    name: "Object",
    proto: "storage.v1.Object",
    fields: &[
        f("kind", Str).output(),
        f("id", Str).output(),
        f("selfLink", Str).output(),
        f("mediaLink", Str).output(),
        f("name", Str),
        f("bucket", Str).output(),
        f("generation", Int64).output(),
        f("metageneration", Int64).output(),
        f("contentType", Str),
        f("storageClass", Str).output(),
        f("size", Int64).output(),
        f("crc32c", Str).output(),
        f("md5Hash", Str),
        f("metadata", StringMap),
        f("contentEncoding", Str),
        f("contentDisposition", Str),
        f("contentLanguage", Str),
        f("cacheControl", Str),
        f("customTime", Str),
        f("kmsKeyName", Str),
        f("etag", Str).output(),
        f("timeCreated", Str).output(),
        f("updated", Str).output(),
        f("timeDeleted", Str).output(),
        f("timeStorageClassUpdated", Str).output(),
    ],
};
pub static BUCKETS: Message = Message {
    name: "Buckets",
    proto: "storage.v1.Buckets",
    fields: &[
        f("kind", Str),
        f("items", msg(&BUCKET)).list(),
        f("nextPageToken", Str),
    ],
};
pub static OBJECTS: Message = Message {
    name: "Objects",
    proto: "storage.v1.Objects",
    fields: &[
        f("kind", Str),
        f("items", msg(&OBJECT)).list(),
        f("nextPageToken", Str),
        f("prefixes", Str).list(),
    ],
};
