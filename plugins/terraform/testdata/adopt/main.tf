# A module of one object that exists outside Terraform and is imported:
# a time_static, whose id is its timestamp (RFC 3339).
terraform {
  required_providers {
    time = {
      source  = "hashicorp/time"
      version = "0.14.2"
    }
  }
}

variable "at" {
  type = string
}

# The config says what was imported: a plan after the import changes
# nothing (the import sets triggers to an empty map).
resource "time_static" "created" {
  rfc3339  = var.at
  triggers = {}
}

output "year" {
  value = time_static.created.year
}
