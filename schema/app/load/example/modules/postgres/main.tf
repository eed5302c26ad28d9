# modules/postgres: the events database, in the sandbox's network. This
# version only records it (terraform_data); a real one creates it.
variable "vpc_id" {
  type = string
}

variable "size" {
  type    = string
  default = "small"
}

resource "terraform_data" "db" {
  input = {
    vpc_id = var.vpc_id
    size   = var.size
  }
}

output "url" {
  value = "postgres://events@db.${var.vpc_id}.internal:5432/events?size=${var.size}"
}
