# modules/sandbox: the install's network and cluster. This version runs on
# any machine with Terraform: it records them with terraform_data and
# writes the network's description with the hashicorp/local provider into
# the directory the agent keeps for the component (byoc_data_dir). A real
# sandbox module creates a VPC and a Kubernetes cluster the same way.
terraform {
  required_providers {
    local = {
      source  = "hashicorp/local"
      version = ">= 1.4.0"
    }
  }
}

variable "name" {
  type        = string
  description = "Names everything the sandbox creates."
}

variable "cidr" {
  type    = string
  default = "10.0.0.0/16"
}

# Set by the agent: a directory kept across jobs of this component.
variable "byoc_data_dir" {
  type = string
}

resource "terraform_data" "network" {
  input = {
    name = var.name
    cidr = var.cidr
  }
}

resource "terraform_data" "cluster" {
  input = {
    name    = "${var.name}-cluster"
    network = terraform_data.network.id
  }
}

locals {
  vpc_id = "vpc-${substr(terraform_data.network.id, 0, 8)}"
}

resource "local_file" "network" {
  filename = "${var.byoc_data_dir}/network.json"
  content = jsonencode({
    vpc_id  = local.vpc_id
    name    = var.name
    cidr    = var.cidr
    cluster = terraform_data.cluster.input.name
  })
}

output "vpc_id" {
  value = local.vpc_id
}

output "cluster" {
  value = terraform_data.cluster.input.name
}
