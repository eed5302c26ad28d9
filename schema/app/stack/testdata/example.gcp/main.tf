# byoc install stack (Google Cloud): install acme of app acme-analytics.
# Apply it with Infrastructure Manager (gcloud infra-manager deployments
# apply ... --local-source=DIR) or terraform apply, in the project the
# install lives in. The variables are the stack's parameters.

terraform {
  required_version = ">= 1.5"
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.0, < 8.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

variable "project_id" {
  type        = string
  description = "The project the install's resources go in (its id)."
}

variable "region" {
  type        = string
  description = "Where the install's resources go."
  default     = "europe-west1"
}

variable "zone" {
  type        = string
  description = "The agent VM's zone (empty: the region's zone b)."
  default     = ""
}

variable "enrollment_token" {
  type        = string
  description = "The enrolment token of install acme (the vendor gives it to you): kept in Secret Manager, never shown."
  sensitive   = true
  validation {
    condition     = length(var.enrollment_token) > 0
    error_message = "The enrolment token is required (byoc install token gives it)."
  }
}

variable "agent_binary_url" {
  type        = string
  description = "HTTPS URL of the agentd binary (linux/amd64)."
  default     = "https://downloads.example.com/agentd-linux-amd64"
}

variable "agent_binary_sha256" {
  type        = string
  description = "SHA-256 of the agentd binary; the VM refuses any other."
  default     = "abababababababababababababababababababababababababababababababab"
}

variable "plugins_binary_url" {
  type        = string
  description = "HTTPS URL of the byoc-plugins binary (linux/amd64) of the same release as agentd."
  default     = "https://downloads.example.com/byoc-plugins-linux-amd64"
}

variable "plugins_binary_sha256" {
  type        = string
  description = "SHA-256 of the byoc-plugins binary; the VM refuses any other."
  default     = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
}

variable "machine_type" {
  type        = string
  description = "The agent VM's machine type."
  default     = "e2-small"
}

variable "network_mode" {
  type        = string
  description = "create: a new VPC network, subnetwork and Cloud NAT for the agent's egress; existing: existing_network and existing_subnetwork (their egress to the internet is yours to provide)."
  default     = "create"
  validation {
    condition     = contains(["create", "existing"], var.network_mode)
    error_message = "network_mode is create or existing."
  }
}

variable "subnet_cidr" {
  type        = string
  description = "The new subnetwork's range (network_mode create)."
  default     = "10.42.0.0/24"
}

variable "existing_network" {
  type        = string
  description = "The agent's VPC network, a name or self link (network_mode existing)."
  default     = ""
}

variable "existing_subnetwork" {
  type        = string
  description = "The agent's subnetwork's self link (network_mode existing)."
  default     = ""
}

variable "enable_provision" {
  type        = bool
  description = "Whether the provision permission mode has a role: false removes it, and the agent fails every provision job naming this parameter."
  default     = true
}

variable "enable_maintenance" {
  type        = bool
  description = "Whether the maintenance permission mode has a role: false removes it, and the agent fails every maintenance job naming this parameter."
  default     = true
}

variable "enable_deprovision" {
  type        = bool
  description = "Whether the deprovision permission mode has a role: false removes it, and the agent fails every deprovision job naming this parameter."
  default     = true
}

variable "enable_break_glass" {
  type        = bool
  description = "Whether the break_glass permission mode has a role: false removes it, and the agent fails every break_glass job naming this parameter."
  default     = false
}

variable "input_admin_email" {
  type        = string
  description = "Who gets alerts. Set by the customer in the install stack."
  default     = ""
  sensitive   = true
}

variable "secret_license_key" {
  type        = string
  description = "The Acme license key, from the vendor portal."
  sensitive   = true
  validation {
    condition     = length(var.secret_license_key) > 0
    error_message = "secret_license_key is required."
  }
}

locals {
  prefix = "byoc-acme"
  zone   = var.zone != "" ? var.zone : "${var.region}-b"
  labels = {
    byoc-install = "acme"
  }
}

resource "google_project_service" "apis" {
  for_each           = toset(["compute.googleapis.com", "iam.googleapis.com", "iamcredentials.googleapis.com", "secretmanager.googleapis.com", "artifactregistry.googleapis.com"])
  service            = each.value
  disable_on_destroy = false
}

# The agent's own service account: it reads the stack's secrets and
# impersonates the modes' accounts, nothing else.
resource "google_service_account" "agent" {
  account_id   = "byoc-acme-agent"
  display_name = "byoc agent of install acme"
  depends_on   = [google_project_service.apis]
}

# Secret Manager: the enrolment token and the customer's inputs and
# secrets; the agent's account is their only reader.
resource "google_secret_manager_secret" "enrollment_token" {
  secret_id = "byoc-acme-enrollment-token"
  labels    = local.labels
  replication {
    auto {}
  }
  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret_version" "enrollment_token" {
  secret      = google_secret_manager_secret.enrollment_token.id
  secret_data = var.enrollment_token
}

resource "google_secret_manager_secret_iam_member" "enrollment_token_agent" {
  secret_id = google_secret_manager_secret.enrollment_token.id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.agent.email}"
}

resource "google_secret_manager_secret" "input_admin_email" {
  count     = var.input_admin_email == "" ? 0 : 1
  secret_id = "byoc-acme-input-admin-email"
  labels    = local.labels
  replication {
    auto {}
  }
  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret_version" "input_admin_email" {
  count       = var.input_admin_email == "" ? 0 : 1
  secret      = google_secret_manager_secret.input_admin_email[0].id
  secret_data = var.input_admin_email
}

resource "google_secret_manager_secret_iam_member" "input_admin_email_agent" {
  count     = var.input_admin_email == "" ? 0 : 1
  secret_id = google_secret_manager_secret.input_admin_email[0].id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.agent.email}"
}

resource "google_secret_manager_secret" "secret_license_key" {
  secret_id = "byoc-acme-secret-license-key"
  labels    = local.labels
  replication {
    auto {}
  }
  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret_version" "secret_license_key" {
  secret      = google_secret_manager_secret.secret_license_key.id
  secret_data = var.secret_license_key
}

resource "google_secret_manager_secret_iam_member" "secret_license_key_agent" {
  secret_id = google_secret_manager_secret.secret_license_key.id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.agent.email}"
}

# The install's registry.
resource "google_artifact_registry_repository" "install" {
  repository_id = "byoc-acme"
  location      = var.region
  format        = "DOCKER"
  description   = "byoc install acme: images and charts copied from the vendor's registry"
  labels        = local.labels
  depends_on    = [google_project_service.apis]
}

# The provision permission mode's service account: Creates the VPC, cluster and database.
resource "google_service_account" "mode_provision" {
  count        = var.enable_provision ? 1 : 0
  account_id   = "byoc-acme-provision"
  display_name = "byoc acme mode_provision"
  description  = "The provision permission mode's service account: Creates the VPC, cluster and database."
  depends_on   = [google_project_service.apis]
}

resource "google_project_iam_member" "mode_provision" {
  for_each = var.enable_provision ? toset(["roles/editor"]) : toset([])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.mode_provision[0].email}"
}

resource "google_artifact_registry_repository_iam_member" "mode_provision_registry" {
  count      = var.enable_provision ? 1 : 0
  location   = google_artifact_registry_repository.install.location
  repository = google_artifact_registry_repository.install.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.mode_provision[0].email}"
}

resource "google_service_account_iam_member" "mode_provision_agent" {
  count              = var.enable_provision ? 1 : 0
  service_account_id = google_service_account.mode_provision[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.agent.email}"
}

# The maintenance permission mode's service account: Deploys new versions and runs actions.
resource "google_service_account" "mode_maintenance" {
  count        = var.enable_maintenance ? 1 : 0
  account_id   = "byoc-acme-maintenance"
  display_name = "byoc acme mode_maintenance"
  description  = "The maintenance permission mode's service account: Deploys new versions and runs actions."
  depends_on   = [google_project_service.apis]
}

resource "google_project_iam_member" "mode_maintenance" {
  for_each = var.enable_maintenance ? toset(["roles/viewer", "roles/compute.networkAdmin"]) : toset([])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.mode_maintenance[0].email}"
}

resource "google_artifact_registry_repository_iam_member" "mode_maintenance_registry" {
  count      = var.enable_maintenance ? 1 : 0
  location   = google_artifact_registry_repository.install.location
  repository = google_artifact_registry_repository.install.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.mode_maintenance[0].email}"
}

resource "google_service_account_iam_member" "mode_maintenance_agent" {
  count              = var.enable_maintenance ? 1 : 0
  service_account_id = google_service_account.mode_maintenance[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.agent.email}"
}

# The deprovision permission mode's service account: Tears the install down.
resource "google_service_account" "mode_deprovision" {
  count        = var.enable_deprovision ? 1 : 0
  account_id   = "byoc-acme-deprovision"
  display_name = "byoc acme mode_deprovision"
  description  = "The deprovision permission mode's service account: Tears the install down."
  depends_on   = [google_project_service.apis]
}

resource "google_project_iam_member" "mode_deprovision" {
  for_each = var.enable_deprovision ? toset(["roles/editor"]) : toset([])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.mode_deprovision[0].email}"
}

resource "google_artifact_registry_repository_iam_member" "mode_deprovision_registry" {
  count      = var.enable_deprovision ? 1 : 0
  location   = google_artifact_registry_repository.install.location
  repository = google_artifact_registry_repository.install.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.mode_deprovision[0].email}"
}

resource "google_service_account_iam_member" "mode_deprovision_agent" {
  count              = var.enable_deprovision ? 1 : 0
  service_account_id = google_service_account.mode_deprovision[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.agent.email}"
}

# The break_glass permission mode's service account
resource "google_service_account" "mode_break_glass" {
  count        = var.enable_break_glass ? 1 : 0
  account_id   = "byoc-acme-break-glass"
  display_name = "byoc acme mode_break_glass"
  description  = "The break_glass permission mode's service account"
  depends_on   = [google_project_service.apis]
}

resource "google_project_iam_member" "mode_break_glass" {
  for_each = var.enable_break_glass ? toset(["roles/editor"]) : toset([])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.mode_break_glass[0].email}"
}

resource "google_artifact_registry_repository_iam_member" "mode_break_glass_registry" {
  count      = var.enable_break_glass ? 1 : 0
  location   = google_artifact_registry_repository.install.location
  repository = google_artifact_registry_repository.install.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.mode_break_glass[0].email}"
}

resource "google_service_account_iam_member" "mode_break_glass_agent" {
  count              = var.enable_break_glass ? 1 : 0
  service_account_id = google_service_account.mode_break_glass[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.agent.email}"
}

# Break-glass role admin: Full access, for incidents only.
resource "google_service_account" "break_glass_admin" {
  count        = var.enable_break_glass ? 1 : 0
  account_id   = "byoc-acme-bg-admin"
  display_name = "byoc acme break_glass_admin"
  description  = "Break-glass role admin: Full access, for incidents only."
  depends_on   = [google_project_service.apis]
}

resource "google_project_iam_member" "break_glass_admin" {
  for_each = var.enable_break_glass ? toset(["roles/editor"]) : toset([])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.break_glass_admin[0].email}"
}

resource "google_artifact_registry_repository_iam_member" "break_glass_admin_registry" {
  count      = var.enable_break_glass ? 1 : 0
  location   = google_artifact_registry_repository.install.location
  repository = google_artifact_registry_repository.install.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.break_glass_admin[0].email}"
}

resource "google_service_account_iam_member" "break_glass_admin_agent" {
  count              = var.enable_break_glass ? 1 : 0
  service_account_id = google_service_account.break_glass_admin[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.agent.email}"
}

# The network: a new one with Cloud NAT, or the customer's; nothing may
# connect to the agent, and it reaches out only over HTTPS and imsd's port.
resource "google_compute_network" "agent" {
  count                   = var.network_mode == "create" ? 1 : 0
  name                    = "${local.prefix}-net"
  auto_create_subnetworks = false
  depends_on              = [google_project_service.apis]
}

resource "google_compute_subnetwork" "agent" {
  count                    = var.network_mode == "create" ? 1 : 0
  name                     = "${local.prefix}-agent"
  network                  = google_compute_network.agent[0].id
  region                   = var.region
  ip_cidr_range            = var.subnet_cidr
  private_ip_google_access = true
}

resource "google_compute_router" "agent" {
  count   = var.network_mode == "create" ? 1 : 0
  name    = "${local.prefix}-router"
  network = google_compute_network.agent[0].id
  region  = var.region
}

resource "google_compute_router_nat" "agent" {
  count                              = var.network_mode == "create" ? 1 : 0
  name                               = "${local.prefix}-nat"
  router                             = google_compute_router.agent[0].name
  region                             = var.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
}

locals {
  network    = var.network_mode == "create" ? google_compute_network.agent[0].id : var.existing_network
  subnetwork = var.network_mode == "create" ? google_compute_subnetwork.agent[0].id : var.existing_subnetwork
}

resource "google_compute_firewall" "agent_deny_in" {
  name          = "${local.prefix}-deny-in"
  network       = local.network
  direction     = "INGRESS"
  priority      = 100
  source_ranges = ["0.0.0.0/0"]
  target_tags   = [local.prefix]
  description   = "nothing may connect to the agent"
  deny {
    protocol = "all"
  }
}

resource "google_compute_firewall" "agent_allow_out" {
  name               = "${local.prefix}-allow-out"
  network            = local.network
  direction          = "EGRESS"
  priority           = 100
  destination_ranges = ["0.0.0.0/0"]
  target_tags        = [local.prefix]
  description        = "HTTPS: imsd, registries, Google APIs"
  allow {
    protocol = "tcp"
    ports    = ["443", "7443"]
  }
}

resource "google_compute_firewall" "agent_deny_out" {
  name               = "${local.prefix}-deny-out"
  network            = local.network
  direction          = "EGRESS"
  priority           = 1000
  destination_ranges = ["0.0.0.0/0"]
  target_tags        = [local.prefix]
  deny {
    protocol = "all"
  }
}

locals {
  # The agent's stack config (internal/stackconfig, format gcp).
  stack_config = {
    break_glass_roles = {
      admin = {
        enabled         = var.enable_break_glass
        name            = "byoc-acme-bg-admin"
        parameter       = "enable_break_glass"
        service_account = var.enable_break_glass ? google_service_account.break_glass_admin[0].email : ""
      }
    }
    enroll_token = {
      gcp_secret = "byoc-acme-enrollment-token"
      parameter  = "enrollment_token"
    }
    format = "gcp"
    gcp = {
      agent_service_account = google_service_account.agent.email
      project               = var.project_id
      region                = var.region
    }
    ims        = "https://ims.example.com:7443"
    ims_key_id = "k1ab2cd3ef4"
    inputs = {
      admin_email = {
        from = {
          gcp_secret = var.input_admin_email == "" ? "" : "byoc-acme-input-admin-email"
          parameter  = "input_admin_email"
        }
        parameter = "input_admin_email"
        sensitive = true
      }
    }
    install    = "acme"
    kubernetes = true
    modes = {
      break_glass = {
        enabled         = var.enable_break_glass
        name            = "byoc-acme-break-glass"
        parameter       = "enable_break_glass"
        service_account = var.enable_break_glass ? google_service_account.mode_break_glass[0].email : ""
      }
      deprovision = {
        enabled         = var.enable_deprovision
        name            = "byoc-acme-deprovision"
        parameter       = "enable_deprovision"
        service_account = var.enable_deprovision ? google_service_account.mode_deprovision[0].email : ""
      }
      maintenance = {
        enabled         = var.enable_maintenance
        name            = "byoc-acme-maintenance"
        parameter       = "enable_maintenance"
        service_account = var.enable_maintenance ? google_service_account.mode_maintenance[0].email : ""
      }
      provision = {
        enabled         = var.enable_provision
        name            = "byoc-acme-provision"
        parameter       = "enable_provision"
        service_account = var.enable_provision ? google_service_account.mode_provision[0].email : ""
      }
    }
    outputs = {
      Registry   = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.install.repository_id}"
      Subnetwork = local.subnetwork
      Zone       = local.zone
    }
    registry = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.install.repository_id}"
    secrets = {
      license_key = {
        gcp_secret = "byoc-acme-secret-license-key"
        parameter  = "secret_license_key"
      }
    }
    stack   = local.prefix
    version = 1
  }
}

# The agent's VM: no external address, Shielded VM, its own service
# account; the stack config and the binaries' addresses in its metadata.
resource "google_compute_instance" "agent" {
  name         = "${local.prefix}-agent"
  machine_type = var.machine_type
  zone         = local.zone
  tags         = [local.prefix]
  labels       = local.labels

  boot_disk {
    initialize_params {
      image = "ubuntu-os-cloud/ubuntu-2404-lts-amd64"
      size  = 30
      type  = "pd-balanced"
    }
  }

  network_interface {
    subnetwork = local.subnetwork
  }

  service_account {
    email  = google_service_account.agent.email
    scopes = ["cloud-platform"]
  }

  shielded_instance_config {
    enable_secure_boot          = true
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  metadata = {
    enable-oslogin         = "TRUE"
    block-project-ssh-keys = "TRUE"
    byoc-agent-url         = var.agent_binary_url
    byoc-agent-sha256      = var.agent_binary_sha256
    byoc-plugins-url       = var.plugins_binary_url
    byoc-plugins-sha256    = var.plugins_binary_sha256
    byoc-stack-config      = jsonencode(local.stack_config)
    startup-script         = local.startup_script
  }

  depends_on = [
    google_secret_manager_secret_version.enrollment_token,
    google_secret_manager_secret_iam_member.enrollment_token_agent,
    google_secret_manager_secret_version.input_admin_email,
    google_secret_manager_secret_iam_member.input_admin_email_agent,
    google_secret_manager_secret_version.secret_license_key,
    google_secret_manager_secret_iam_member.secret_license_key_agent,
    google_service_account_iam_member.mode_provision_agent,
    google_project_iam_member.mode_provision,
    google_service_account_iam_member.mode_maintenance_agent,
    google_project_iam_member.mode_maintenance,
    google_service_account_iam_member.mode_deprovision_agent,
    google_project_iam_member.mode_deprovision,
    google_service_account_iam_member.mode_break_glass_agent,
    google_project_iam_member.mode_break_glass,
    google_service_account_iam_member.break_glass_admin_agent,
    google_project_iam_member.break_glass_admin,
  ]
}

locals {
  startup_script = <<-BYOC_SCRIPT
#!/bin/bash
# byoc install stack (Google Cloud): installs agentd and byoc-plugins beside
# it, and byoc-stack-sync, which writes its stack config from the VM's
# metadata (byoc-stack-config) and restarts agentd when it changes.
set -euo pipefail
install -d -m 0700 /etc/byoc /var/lib/agentd
md() { curl -fsS -H 'Metadata-Flavor: Google' "http://metadata.google.internal/computeMetadata/v1/instance/attributes/$1"; }
download() {
  curl -fsSL --proto '=https' --retry 5 -o "/usr/local/bin/$1.download" "$(md "$2")"
  echo "$(md "$3")  /usr/local/bin/$1.download" | sha256sum -c -
  install -m 0755 "/usr/local/bin/$1.download" "/usr/local/bin/$1"
  rm -f "/usr/local/bin/$1.download"
}
[ -x /usr/local/bin/agentd ] || download agentd byoc-agent-url byoc-agent-sha256
[ -x /usr/local/bin/byoc-plugins ] || download byoc-plugins byoc-plugins-url byoc-plugins-sha256
cat > /usr/local/bin/byoc-stack-sync <<'BYOC_SYNC'
#!/bin/bash
set -uo pipefail
umask 077
url=http://metadata.google.internal/computeMetadata/v1/instance/attributes/byoc-stack-config
etag=0
while true; do
  if curl -fsS -D /run/byoc-stack.headers -o /run/byoc-stack.json -H 'Metadata-Flavor: Google' "$url?wait_for_change=true&last_etag=$etag"; then
    etag=$(awk 'tolower($1)=="etag:" {print $2}' /run/byoc-stack.headers | tr -d '\r')
    if ! cmp -s /run/byoc-stack.json /etc/byoc/stack.json; then
      install -m 0600 /run/byoc-stack.json /etc/byoc/stack.json
      systemctl restart agentd
    fi
  else
    sleep 10
  fi
done
BYOC_SYNC
chmod 0755 /usr/local/bin/byoc-stack-sync
umask 077
md byoc-stack-config > /etc/byoc/stack.json
cat > /etc/systemd/system/agentd.service <<'BYOC_UNIT'
[Unit]
Description=byoc agent (install acme)
After=network-online.target
Wants=network-online.target
[Service]
ExecStart=/usr/local/bin/agentd --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd
Restart=always
RestartSec=5
[Install]
WantedBy=multi-user.target
BYOC_UNIT
cat > /etc/systemd/system/byoc-stack-sync.service <<'BYOC_UNIT'
[Unit]
Description=byoc: keep the agent's stack config equal to the VM's metadata
[Service]
ExecStart=/usr/local/bin/byoc-stack-sync
Restart=always
[Install]
WantedBy=multi-user.target
BYOC_UNIT
# IAM bindings take a minute or two to apply everywhere.
for i in $(seq 1 20); do
  if /usr/local/bin/agentd preflight --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd > /var/log/agentd-preflight.txt 2>&1; then break; fi
  sleep 30
done
systemctl daemon-reload
systemctl enable --now byoc-stack-sync agentd
BYOC_SCRIPT
}

output "agent_service_account" {
  description = "The agent's own service account."
  value       = google_service_account.agent.email
}

output "provision_service_account" {
  description = "The provision mode's service account (empty while it is turned off)."
  value       = var.enable_provision ? google_service_account.mode_provision[0].email : ""
}

output "maintenance_service_account" {
  description = "The maintenance mode's service account (empty while it is turned off)."
  value       = var.enable_maintenance ? google_service_account.mode_maintenance[0].email : ""
}

output "deprovision_service_account" {
  description = "The deprovision mode's service account (empty while it is turned off)."
  value       = var.enable_deprovision ? google_service_account.mode_deprovision[0].email : ""
}

output "break_glass_service_account" {
  description = "The break_glass mode's service account (empty while it is turned off)."
  value       = var.enable_break_glass ? google_service_account.mode_break_glass[0].email : ""
}

output "registry" {
  description = "The install's registry (Artifact Registry)."
  value       = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.install.repository_id}"
}

output "vm_name" {
  description = "The agent's VM."
  value       = google_compute_instance.agent.name
}

output "subnetwork" {
  description = "The agent's subnetwork."
  value       = local.subnetwork
}
