"""Run a timm ViT trained at 224 x 224 at other image sizes, and at mixed sizes in one batch.

No weights are downloaded: the model is randomly initialised (pass pretrained=True in your own code).

    python examples/timm_new_image_size.py
"""

import timm
import torch

from omnipos.vision import patch_grid, patch_padding_mask
from omnipos.vision.timm import adapt_vit, resize_state_dict

torch.manual_seed(0)
model = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, dynamic_img_size=True).eval()
reference.load_state_dict(model.state_dict())

adapt_vit(model)  # in place; the same model object comes back
print(model.omnipos_positions)

# 1. A new size: 272 x 192 is a 17 x 12 patch grid. Same logits as timm's dynamic_img_size=True model, but the
#    position table is resampled once for this grid and cached, not on every forward.
x = torch.randn(4, 3, 272, 192)
with torch.no_grad():
    logits = model(x)
    print("272x192 grid", patch_grid((272, 192), 16), "max |omnipos - timm| =",
          f"{(logits - reference(x)).abs().max().item():.1e}")
    model(torch.randn(4, 3, 272, 192))
print("cache after two batches:", model.omnipos_positions.cache_info())

# 2. Mixed sizes in one batch: pad to a common size and say how big each image really is. Each image gets its
#    own grid's positions; padding is zeroed and masked out of attention, so its content cannot matter.
images = [torch.randn(3, 272, 192), torch.randn(3, 200, 150), torch.randn(3, 96, 250)]
sizes = torch.tensor([im.shape[-2:] for im in images])
batch = torch.zeros(3, 3, int(sizes[:, 0].max()), int(sizes[:, 1].max()))
for i, im in enumerate(images):
    batch[i, :, : im.shape[1], : im.shape[2]] = im
with torch.no_grad():
    mixed = model(batch, image_sizes=sizes)
    alone = torch.cat([model(im.unsqueeze(0)) for im in images])
print("mixed batch vs one image at a time: max diff", f"{(mixed - alone).abs().max().item():.1e}")
mask = patch_padding_mask(sizes, 16, patch_grid(tuple(batch.shape[-2:]), 16))
print("real patches per image:", mask.sum(1).tolist(), "of", mask.shape[1])

# 3. A checkpoint trained on a non-square grid (192 x 320 -> 12 x 20 patches) into a 224 x 224 model.
wide = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=(192, 320))
state = resize_state_dict(wide.state_dict(), grid=(14, 14), old_grid=(12, 20))
timm.create_model("vit_tiny_patch16_224", pretrained=False).load_state_dict(state)
print("resized pos_embed:", tuple(wide.pos_embed.shape), "->", tuple(state["pos_embed"].shape))
