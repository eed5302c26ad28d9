// byoc install stack (Bicep): generated from the same model as its ARM
// template; deploy either one.

metadata description = 'byoc install stack: install acme of app acme-analytics (the agent, a managed identity per permission mode, Key Vault, the install\'s registry)'
metadata parameterGroups = {
  inputs: [
    'InputAdminEmail'
  ]
  permissionModes: [
    'EnableProvision'
    'EnableMaintenance'
    'EnableDeprovision'
    'EnableBreakGlass'
  ]
  secrets: [
    'SecretLicenseKey'
  ]
}

@description('The administrator\'s SSH public key (ssh-ed25519 or ssh-rsa ...).')
param AdminSshPublicKey string

@description('The VM\'s administrator account (SSH key only; the NSG lets no one in: use the serial console or Bastion).')
param AdminUsername string = 'byocadmin'

@description('SHA-256 of the agentd binary; the VM refuses any other.')
param AgentBinarySha256 string = 'abababababababababababababababababababababababababababababababab'

@description('HTTPS URL of the agentd binary (linux/amd64).')
param AgentBinaryUrl string = 'https://downloads.example.com/agentd-linux-amd64'

@description('Changes with every deployment (leave the default) so that the agent\'s VM rewrites its stack config.')
param DeploymentTag string = utcNow()

@description('Whether the break_glass permission mode has a role: false removes it, and the agent fails every break_glass job naming this parameter.')
param EnableBreakGlass bool = false

@description('Whether the deprovision permission mode has a role: false removes it, and the agent fails every deprovision job naming this parameter.')
param EnableDeprovision bool = true

@description('Whether the maintenance permission mode has a role: false removes it, and the agent fails every maintenance job naming this parameter.')
param EnableMaintenance bool = true

@description('Whether the provision permission mode has a role: false removes it, and the agent fails every provision job naming this parameter.')
param EnableProvision bool = true

@description('The enrolment token of install acme (the vendor gives it to you): kept in the stack\'s Key Vault, never shown.')
@secure()
@minLength(1)
param EnrollmentToken string

@description('The resource id of the agent\'s subnet (VnetMode existing).')
param ExistingSubnetId string = ''

@description('Who gets alerts. Set by the customer in the install stack.')
@secure()
param InputAdminEmail string = ''

@description('Where the stack\'s resources go (default: the resource group\'s location).')
param Location string = resourceGroup().location

@description('SHA-256 of the byoc-plugins binary; the VM refuses any other.')
param PluginsBinarySha256 string = 'cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd'

@description('HTTPS URL of the byoc-plugins binary (linux/amd64) of the same release as agentd, installed beside it.')
param PluginsBinaryUrl string = 'https://downloads.example.com/byoc-plugins-linux-amd64'

@description('The Acme license key, from the vendor portal.')
@secure()
@minLength(1)
param SecretLicenseKey string

@description('The agent VM\'s size.')
param VmSize string = 'Standard_B2s'

@description('The new VNet\'s address space (VnetMode create); the agent\'s subnet is its first /24.')
param VnetCidr string = '10.42.0.0/16'

@description('create: a new VNet, subnet and NAT gateway for the agent\'s egress; existing: ExistingSubnetId (its egress to the internet is yours to provide).')
@allowed([
  'create'
  'existing'
])
param VnetMode string = 'create'

var createVnet = (VnetMode == 'create')

var prefix = 'byoc-acme'

var registryName = concat('byoc', uniqueString(resourceGroup().id, 'acme'))

var subnetId = (createVnet ? resourceId('Microsoft.Network/virtualNetworks/subnets', 'byoc-acme-vnet', 'agent') : ExistingSubnetId)

var vaultName = concat('byoc', uniqueString(resourceGroup().id, 'acme'))

resource identity_agent 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  location: Location
  name: 'byoc-acme-agent'
  tags: {
    'byoc-install': 'acme'
  }
}

resource vault 'Microsoft.KeyVault/vaults@2024-11-01' = {
  location: Location
  name: vaultName
  properties: {
    enableRbacAuthorization: true
    enableSoftDelete: true
    publicNetworkAccess: 'Enabled'
    sku: {
      family: 'A'
      name: 'standard'
    }
    softDeleteRetentionInDays: 7
    tenantId: subscription().tenantId
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource secret_enrollment_token 'Microsoft.KeyVault/vaults/secrets@2024-11-01' = {
  dependsOn: [
    vault
  ]
  name: concat(vaultName, '/enrollment-token')
  properties: {
    value: EnrollmentToken
  }
}

resource roleAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  dependsOn: [
    vault
    identity_agent
  ]
  name: guid(vault.id, identity_agent.id, '4633458b-17de-408a-b874-0445c86b69e6')
  properties: {
    description: 'byoc agent of install acme: reads the stack\'s secrets'
    principalId: identity_agent.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '4633458b-17de-408a-b874-0445c86b69e6')
  }
  scope: vault
}

resource registry 'Microsoft.ContainerRegistry/registries@2025-11-01' = {
  location: Location
  name: registryName
  properties: {
    adminUserEnabled: false
    anonymousPullEnabled: false
  }
  sku: {
    name: 'Basic'
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource secret_input_admin_email 'Microsoft.KeyVault/vaults/secrets@2024-11-01' = if (!(empty(InputAdminEmail))) {
  dependsOn: [
    vault
  ]
  name: concat(vaultName, '/input-admin-email')
  properties: {
    value: InputAdminEmail
  }
}

resource secret_secret_license_key 'Microsoft.KeyVault/vaults/secrets@2024-11-01' = {
  dependsOn: [
    vault
  ]
  name: concat(vaultName, '/secret-license-key')
  properties: {
    value: SecretLicenseKey
  }
}

resource identity_provision 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = if (EnableProvision) {
  location: Location
  name: 'byoc-acme-provision'
  tags: {
    'byoc-install': 'acme'
  }
}

resource roleAssignment2 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableProvision) {
  dependsOn: [
    identity_provision
  ]
  name: guid(resourceGroup().id, identity_provision.id, 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  properties: {
    description: 'byoc install acme: the provision permission mode: Creates the VPC, cluster and database.'
    principalId: identity_provision.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  }
}

resource roleAssignment3 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableProvision) {
  dependsOn: [
    identity_provision
    registry
  ]
  name: guid(registry.id, identity_provision.id, '8311e382-0749-4cb8-b61a-304f252e45ec')
  properties: {
    description: 'byoc install acme: the provision permission mode: Creates the VPC, cluster and database.'
    principalId: identity_provision.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '8311e382-0749-4cb8-b61a-304f252e45ec')
  }
  scope: registry
}

resource identity_maintenance 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = if (EnableMaintenance) {
  location: Location
  name: 'byoc-acme-maintenance'
  tags: {
    'byoc-install': 'acme'
  }
}

resource roleAssignment4 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableMaintenance) {
  dependsOn: [
    identity_maintenance
  ]
  name: guid(resourceGroup().id, identity_maintenance.id, 'acdd72a7-3385-48ef-bd42-f606fba81ae7')
  properties: {
    description: 'byoc install acme: the maintenance permission mode: Deploys new versions and runs actions.'
    principalId: identity_maintenance.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'acdd72a7-3385-48ef-bd42-f606fba81ae7')
  }
}

resource roleAssignment5 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableMaintenance) {
  dependsOn: [
    identity_maintenance
  ]
  name: guid(resourceGroup().id, identity_maintenance.id, '4d97b98b-1d4f-4787-a291-c67834d212e7')
  properties: {
    description: 'byoc install acme: the maintenance permission mode: Deploys new versions and runs actions.'
    principalId: identity_maintenance.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '4d97b98b-1d4f-4787-a291-c67834d212e7')
  }
}

resource roleAssignment6 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableMaintenance) {
  dependsOn: [
    identity_maintenance
    registry
  ]
  name: guid(registry.id, identity_maintenance.id, '8311e382-0749-4cb8-b61a-304f252e45ec')
  properties: {
    description: 'byoc install acme: the maintenance permission mode: Deploys new versions and runs actions.'
    principalId: identity_maintenance.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '8311e382-0749-4cb8-b61a-304f252e45ec')
  }
  scope: registry
}

resource identity_deprovision 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = if (EnableDeprovision) {
  location: Location
  name: 'byoc-acme-deprovision'
  tags: {
    'byoc-install': 'acme'
  }
}

resource roleAssignment7 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableDeprovision) {
  dependsOn: [
    identity_deprovision
  ]
  name: guid(resourceGroup().id, identity_deprovision.id, 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  properties: {
    description: 'byoc install acme: the deprovision permission mode: Tears the install down.'
    principalId: identity_deprovision.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  }
}

resource roleAssignment8 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableDeprovision) {
  dependsOn: [
    identity_deprovision
    registry
  ]
  name: guid(registry.id, identity_deprovision.id, '8311e382-0749-4cb8-b61a-304f252e45ec')
  properties: {
    description: 'byoc install acme: the deprovision permission mode: Tears the install down.'
    principalId: identity_deprovision.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '8311e382-0749-4cb8-b61a-304f252e45ec')
  }
  scope: registry
}

resource identity_break_glass 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = if (EnableBreakGlass) {
  location: Location
  name: 'byoc-acme-break-glass'
  tags: {
    'byoc-install': 'acme'
  }
}

resource roleAssignment9 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableBreakGlass) {
  dependsOn: [
    identity_break_glass
  ]
  name: guid(resourceGroup().id, identity_break_glass.id, 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  properties: {
    description: 'byoc install acme: the break_glass permission mode'
    principalId: identity_break_glass.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  }
}

resource roleAssignment10 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableBreakGlass) {
  dependsOn: [
    identity_break_glass
    registry
  ]
  name: guid(registry.id, identity_break_glass.id, '8311e382-0749-4cb8-b61a-304f252e45ec')
  properties: {
    description: 'byoc install acme: the break_glass permission mode'
    principalId: identity_break_glass.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '8311e382-0749-4cb8-b61a-304f252e45ec')
  }
  scope: registry
}

resource identity_break_glass_admin 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = if (EnableBreakGlass) {
  location: Location
  name: 'byoc-acme-break-glass-admin'
  tags: {
    'byoc-install': 'acme'
  }
}

resource roleAssignment11 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableBreakGlass) {
  dependsOn: [
    identity_break_glass_admin
  ]
  name: guid(resourceGroup().id, identity_break_glass_admin.id, 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  properties: {
    description: 'byoc install acme: break-glass role admin: Full access, for incidents only.'
    principalId: identity_break_glass_admin.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'b24988ac-6182-42a0-9e5e-1a1e5bab2c3c')
  }
}

resource roleAssignment12 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (EnableBreakGlass) {
  dependsOn: [
    identity_break_glass_admin
    registry
  ]
  name: guid(registry.id, identity_break_glass_admin.id, '8311e382-0749-4cb8-b61a-304f252e45ec')
  properties: {
    description: 'byoc install acme: break-glass role admin: Full access, for incidents only.'
    principalId: identity_break_glass_admin.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '8311e382-0749-4cb8-b61a-304f252e45ec')
  }
  scope: registry
}

resource nsg_nsg 'Microsoft.Network/networkSecurityGroups@2025-05-01' = {
  location: Location
  name: 'byoc-acme-nsg'
  properties: {
    securityRules: [
      {
        name: 'AllowHttpsOut'
        properties: {
          access: 'Allow'
          description: 'HTTPS: imsd, registries, Azure APIs'
          destinationAddressPrefix: 'Internet'
          destinationPortRange: '443'
          direction: 'Outbound'
          priority: 100
          protocol: 'Tcp'
          sourceAddressPrefix: '*'
          sourcePortRange: '*'
        }
      }
      {
        name: 'AllowImsdOut'
        properties: {
          access: 'Allow'
          description: 'imsd'
          destinationAddressPrefix: 'Internet'
          destinationPortRange: '7443'
          direction: 'Outbound'
          priority: 110
          protocol: 'Tcp'
          sourceAddressPrefix: '*'
          sourcePortRange: '*'
        }
      }
      {
        name: 'DenyOtherInternetOut'
        properties: {
          access: 'Deny'
          destinationAddressPrefix: 'Internet'
          destinationPortRange: '*'
          direction: 'Outbound'
          priority: 4000
          protocol: '*'
          sourceAddressPrefix: '*'
          sourcePortRange: '*'
        }
      }
      {
        name: 'DenyAllIn'
        properties: {
          access: 'Deny'
          description: 'nothing may connect to the agent'
          destinationAddressPrefix: '*'
          destinationPortRange: '*'
          direction: 'Inbound'
          priority: 4096
          protocol: '*'
          sourceAddressPrefix: '*'
          sourcePortRange: '*'
        }
      }
    ]
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource publicIp_nat_ip 'Microsoft.Network/publicIPAddresses@2025-05-01' = if (createVnet) {
  location: Location
  name: 'byoc-acme-nat-ip'
  properties: {
    publicIPAddressVersion: 'IPv4'
    publicIPAllocationMethod: 'Static'
  }
  sku: {
    name: 'Standard'
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource natGateway_nat 'Microsoft.Network/natGateways@2025-05-01' = if (createVnet) {
  dependsOn: [
    publicIp_nat_ip
  ]
  location: Location
  name: 'byoc-acme-nat'
  properties: {
    publicIpAddresses: [
      {
        id: publicIp_nat_ip.id
      }
    ]
  }
  sku: {
    name: 'Standard'
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource vnet_vnet 'Microsoft.Network/virtualNetworks@2025-05-01' = if (createVnet) {
  dependsOn: [
    natGateway_nat
    nsg_nsg
  ]
  location: Location
  name: 'byoc-acme-vnet'
  properties: {
    addressSpace: {
      addressPrefixes: [
        VnetCidr
      ]
    }
    subnets: [
      {
        name: 'agent'
        properties: {
          addressPrefix: cidrSubnet(VnetCidr, 24, 0)
          defaultOutboundAccess: false
          natGateway: {
            id: natGateway_nat.id
          }
          networkSecurityGroup: {
            id: nsg_nsg.id
          }
        }
      }
    ]
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource nic_nic 'Microsoft.Network/networkInterfaces@2025-05-01' = {
  dependsOn: [
    nsg_nsg
    vnet_vnet
  ]
  location: Location
  name: 'byoc-acme-nic'
  properties: {
    ipConfigurations: [
      {
        name: 'agent'
        properties: {
          privateIPAllocationMethod: 'Dynamic'
          subnet: {
            id: subnetId
          }
        }
      }
    ]
    networkSecurityGroup: {
      id: nsg_nsg.id
    }
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource vm_agent 'Microsoft.Compute/virtualMachines@2026-04-01' = {
  dependsOn: [
    secret_input_admin_email
    secret_secret_license_key
    roleAssignment2
    roleAssignment3
    roleAssignment4
    roleAssignment5
    roleAssignment6
    roleAssignment7
    roleAssignment8
    roleAssignment9
    roleAssignment10
    roleAssignment11
    roleAssignment12
    nic_nic
    registry
    secret_enrollment_token
    roleAssignment
  ]
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: union({
      '${identity_agent.id}': {}
    }, (EnableProvision ? {
      '${identity_provision.id}': {}
    } : {}), (EnableMaintenance ? {
      '${identity_maintenance.id}': {}
    } : {}), (EnableDeprovision ? {
      '${identity_deprovision.id}': {}
    } : {}), (EnableBreakGlass ? {
      '${identity_break_glass.id}': {}
    } : {}), (EnableBreakGlass ? {
      '${identity_break_glass_admin.id}': {}
    } : {}))
  }
  location: Location
  name: 'byoc-acme-agent'
  properties: {
    hardwareProfile: {
      vmSize: VmSize
    }
    networkProfile: {
      networkInterfaces: [
        {
          id: nic_nic.id
        }
      ]
    }
    osProfile: {
      adminUsername: AdminUsername
      computerName: 'byoc-acme-agent'
      linuxConfiguration: {
        disablePasswordAuthentication: true
        ssh: {
          publicKeys: [
            {
              keyData: AdminSshPublicKey
              path: concat('/home/', AdminUsername, '/.ssh/authorized_keys')
            }
          ]
        }
      }
    }
    securityProfile: {
      securityType: 'TrustedLaunch'
      uefiSettings: {
        secureBootEnabled: true
        vTpmEnabled: true
      }
    }
    storageProfile: {
      imageReference: {
        offer: 'ubuntu-24_04-lts'
        publisher: 'Canonical'
        sku: 'server'
        version: 'latest'
      }
      osDisk: {
        createOption: 'FromImage'
        diskSizeGB: 30
        managedDisk: {
          storageAccountType: 'StandardSSD_LRS'
        }
      }
    }
  }
  tags: {
    'byoc-install': 'acme'
  }
}

resource vmExtension_byoc_agent 'Microsoft.Compute/virtualMachines/extensions@2026-04-01' = {
  dependsOn: [
    vm_agent
  ]
  location: Location
  name: 'byoc-acme-agent/byoc-agent'
  properties: {
    autoUpgradeMinorVersion: true
    forceUpdateTag: DeploymentTag
    protectedSettings: {
      script: base64(concat('#!/bin/bash\n# byoc install stack (Azure): installs agentd and byoc-plugins beside it,\n# writes its stack config, runs its preflight checks (waiting out the\n# propagation of the role assignments) and starts it under systemd.\nset -euo pipefail\ninstall -d -m 0700 /etc/byoc /var/lib/agentd\n', 'curl -fsSL --proto \'=https\' --retry 5 -o /usr/local/bin/agentd.download \'', AgentBinaryUrl, '\'\necho \'', AgentBinarySha256, '  /usr/local/bin/agentd.download\' | sha256sum -c -\ninstall -m 0755 /usr/local/bin/agentd.download /usr/local/bin/agentd\nrm -f /usr/local/bin/agentd.download\n', 'curl -fsSL --proto \'=https\' --retry 5 -o /usr/local/bin/byoc-plugins.download \'', PluginsBinaryUrl, '\'\necho \'', PluginsBinarySha256, '  /usr/local/bin/byoc-plugins.download\' | sha256sum -c -\ninstall -m 0755 /usr/local/bin/byoc-plugins.download /usr/local/bin/byoc-plugins\nrm -f /usr/local/bin/byoc-plugins.download\n', 'umask 077\ncat > /etc/byoc/stack.json <<\'BYOC_STACK_CONFIG\'\n', string({
        azure: {
          agent_client_id: identity_agent.properties.clientId
          key_vault_url: vault.properties.vaultUri
          resource_group: resourceGroup().name
          subscription_id: subscription().subscriptionId
          tenant_id: subscription().tenantId
        }
        break_glass_roles: {
          admin: {
            client_id: (EnableBreakGlass ? identity_break_glass_admin.properties.clientId : '')
            enabled: EnableBreakGlass
            name: 'byoc-acme-break-glass-admin'
            parameter: 'EnableBreakGlass'
          }
        }
        enroll_token: {
          key_vault_secret: 'enrollment-token'
          parameter: 'EnrollmentToken'
        }
        format: 'azure'
        ims: 'https://ims.example.com:7443'
        ims_key_id: 'k1ab2cd3ef4'
        inputs: {
          admin_email: {
            from: {
              key_vault_secret: (empty(InputAdminEmail) ? '' : 'input-admin-email')
              parameter: 'InputAdminEmail'
            }
            parameter: 'InputAdminEmail'
            sensitive: true
          }
        }
        install: 'acme'
        kubernetes: true
        modes: {
          break_glass: {
            client_id: (EnableBreakGlass ? identity_break_glass.properties.clientId : '')
            enabled: EnableBreakGlass
            name: 'byoc-acme-break-glass'
            parameter: 'EnableBreakGlass'
          }
          deprovision: {
            client_id: (EnableDeprovision ? identity_deprovision.properties.clientId : '')
            enabled: EnableDeprovision
            name: 'byoc-acme-deprovision'
            parameter: 'EnableDeprovision'
          }
          maintenance: {
            client_id: (EnableMaintenance ? identity_maintenance.properties.clientId : '')
            enabled: EnableMaintenance
            name: 'byoc-acme-maintenance'
            parameter: 'EnableMaintenance'
          }
          provision: {
            client_id: (EnableProvision ? identity_provision.properties.clientId : '')
            enabled: EnableProvision
            name: 'byoc-acme-provision'
            parameter: 'EnableProvision'
          }
        }
        outputs: {
          KeyVaultUri: vault.properties.vaultUri
          RegistryLoginServer: registry.properties.loginServer
          SubnetId: subnetId
        }
        registry: registry.properties.loginServer
        secrets: {
          license_key: {
            key_vault_secret: 'secret-license-key'
            parameter: 'SecretLicenseKey'
          }
        }
        stack: deployment().name
        version: 1
      }), '\nBYOC_STACK_CONFIG\ncat > /etc/systemd/system/agentd.service <<\'BYOC_UNIT\'\n[Unit]\nDescription=byoc agent (install acme)\nAfter=network-online.target\nWants=network-online.target\n[Service]\nExecStart=/usr/local/bin/agentd --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd\nRestart=always\nRestartSec=5\n[Install]\nWantedBy=multi-user.target\nBYOC_UNIT\n# Role assignments take minutes to reach Key Vault and the identities.\nfor i in $(seq 1 20); do\n  if /usr/local/bin/agentd preflight --stack-config /etc/byoc/stack.json --state-dir /var/lib/agentd > /var/log/agentd-preflight.txt 2>&1; then\n    systemctl daemon-reload\n    systemctl enable agentd\n    systemctl restart agentd\n    exit 0\n  fi\n  sleep 30\ndone\ncat /var/log/agentd-preflight.txt\nexit 1\n'))
    }
    publisher: 'Microsoft.Azure.Extensions'
    type: 'CustomScript'
    typeHandlerVersion: '2.1'
  }
  tags: {
    'byoc-install': 'acme'
  }
}

output AgentClientId string = identity_agent.properties.clientId

output BreakGlassClientId string = (EnableBreakGlass ? identity_break_glass.properties.clientId : '')

output DeprovisionClientId string = (EnableDeprovision ? identity_deprovision.properties.clientId : '')

output KeyVaultUri string = vault.properties.vaultUri

output MaintenanceClientId string = (EnableMaintenance ? identity_maintenance.properties.clientId : '')

output ProvisionClientId string = (EnableProvision ? identity_provision.properties.clientId : '')

output RegistryLoginServer string = registry.properties.loginServer

output SubnetId string = subnetId

output VmName string = 'byoc-acme-agent'
