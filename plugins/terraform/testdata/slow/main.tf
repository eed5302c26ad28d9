# A module whose apply takes as long as var.wait, between two objects:
# the cancel test interrupts it in the middle.
terraform {
  required_providers {
    time = {
      source  = "hashicorp/time"
      version = "0.14.2"
    }
  }
}

variable "wait" {
  type = string
}

resource "terraform_data" "first" {
  input = "first"
}

resource "time_sleep" "wait" {
  depends_on      = [terraform_data.first]
  create_duration = var.wait
}

resource "terraform_data" "last" {
  depends_on = [time_sleep.wait]
  input      = "last"
}

output "done" {
  value = terraform_data.last.output
}
