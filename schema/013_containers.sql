-- 013_containers.sql - kpiscope trace store, schema version 13: which
-- container and Kubernetes pod served (or, on exchanges_out, made) each
-- request, resolved by kpi-agent with no API server (docs/agent.md
-- "Containers and pods"). Applied on top of version 12 in one transaction; the
-- agent sets user_version.
-- Once per process: its cgroup v2 path (/proc/PID/cgroup) gives the runtime's
-- container id and the pod uid, the runtime's OCI state on the host
-- (config.json annotations of CRI-O and containerd, podman's container list,
-- docker's config.v2.json) the names. All NULL for a process on the host; a
-- cgroup whose shape the agent does not know leaves them NULL too (counted on
-- the agent's stop line), and a name the runtime's state does not give stays
-- NULL beside a known id: never a guess.

ALTER TABLE requests ADD COLUMN container_id TEXT;    -- the runtime's id, 64 hex digits
ALTER TABLE requests ADD COLUMN container_name TEXT;  -- Kubernetes container name, else the runtime's (podman, docker)
ALTER TABLE requests ADD COLUMN pod_name TEXT;
ALTER TABLE requests ADD COLUMN pod_namespace TEXT;
ALTER TABLE requests ADD COLUMN pod_uid TEXT;
ALTER TABLE requests ADD COLUMN cgroup_id INTEGER;    -- inode of the container's cgroup v2 directory
ALTER TABLE exchanges_out ADD COLUMN container_id TEXT;
ALTER TABLE exchanges_out ADD COLUMN container_name TEXT;
ALTER TABLE exchanges_out ADD COLUMN pod_name TEXT;
ALTER TABLE exchanges_out ADD COLUMN pod_namespace TEXT;
ALTER TABLE exchanges_out ADD COLUMN pod_uid TEXT;
ALTER TABLE exchanges_out ADD COLUMN cgroup_id INTEGER;
CREATE INDEX IF NOT EXISTS requests_pod ON requests(pod_namespace, pod_name) WHERE pod_name IS NOT NULL;
