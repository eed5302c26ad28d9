# A small module for the terraform type's tests: a terraform_data object
# and a file written by the mirrored hashicorp/local provider.
terraform {
  required_providers {
    local = {
      source  = "hashicorp/local"
      version = "1.4.0"
    }
  }
}

variable "name" {
  type = string
}

variable "dir" {
  type        = string
  description = "where the site's file is written"
}

variable "password" {
  type      = string
  sensitive = true
  default   = "hunter2"
}

resource "terraform_data" "site" {
  input = {
    name     = var.name
    password = var.password
  }
}

resource "local_file" "index" {
  filename = "${var.dir}/index.html"
  content  = "hello ${var.name}"
}

output "url" {
  value = "file://${local_file.index.filename}"
}

output "name" {
  value = terraform_data.site.output.name
}

output "meta" {
  value = {
    name  = var.name
    files = 1
  }
}
