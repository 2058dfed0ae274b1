"""The CIFAR-style ResNet (6n+2 layers) in PyTorch, shaped exactly as Tally's.

Stem: 3x3 conv with 16 filters, BN, ReLU; three stages of n BasicBlocks with 16, 32, 64
channels, stride 2 at the first block of stages 2 and 3, a projection shortcut (1x1 conv
+ BN) where the shape changes; global average pool; fully connected. Parameter names
follow torchvision's ResNet (conv1, bn1, layer1.0.conv1, ..., layer2.0.downsample.0, fc).
"""
import torch.nn as nn
from torchvision.models.resnet import BasicBlock


class CifarResNet(nn.Module):
    def __init__(self, depth, num_classes=10, zero_init_residual=False):
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise ValueError("CIFAR ResNet depth must be 6n+2, got %d" % depth)
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.inplanes = 16
        self.layer1 = self._stage(16, n, 1)
        self.layer2 = self._stage(32, n, 2)
        self.layer3 = self._stage(64, n, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.zeros_(m.bn2.weight)

    def _stage(self, planes, blocks, stride):
        down = None
        if stride != 1 or self.inplanes != planes:
            down = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                 nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, down)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.avgpool(x).flatten(1))


def cifar_resnet(depth, num_classes=10, zero_init_residual=False):
    return CifarResNet(depth, num_classes, zero_init_residual)
