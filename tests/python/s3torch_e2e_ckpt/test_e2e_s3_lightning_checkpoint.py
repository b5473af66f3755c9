#  Copyright Amazon.com, Inc. or its affiliates. All Rights Reserved.
#  // SPDX-License-Identifier: BSD
import pytest
import torch

from typing import Dict, Any

from bucketload.s3torch import S3Checkpoint
from bucketload.s3torch.lightning import S3LightningCheckpoint
from bucketload.s3torch import S3Exception

from s3torch_e2e_ckpt.models.net import Net


def test_save_and_load_checkpoint(checkpoint_directory):
    tensor = torch.rand(3, 10, 10)
    s3_lightning_checkpoint = S3LightningCheckpoint(region=checkpoint_directory.region)
    checkpoint_name = "lightning_checkpoint.ckpt"
    s3_uri = f"{checkpoint_directory.s3_uri}{checkpoint_name}"
    s3_lightning_checkpoint.save_checkpoint(tensor, s3_uri)
    loaded_checkpoint = s3_lightning_checkpoint.load_checkpoint(s3_uri)
    assert torch.equal(tensor, loaded_checkpoint)


def test_load_compatibility_with_s3_checkpoint(checkpoint_directory):
    tensor = torch.rand(3, 10, 10)
    checkpoint_name = "general_checkpoint.pt"
    checkpoint = S3Checkpoint(region=checkpoint_directory.region)
    s3_uri = f"{checkpoint_directory.s3_uri}{checkpoint_name}"
    with checkpoint.writer(s3_uri) as writer:
        torch.save(tensor, writer)
    s3_lightning_checkpoint = S3LightningCheckpoint(region=checkpoint_directory.region)
    loaded_checkpoint = s3_lightning_checkpoint.load_checkpoint(s3_uri)
    assert torch.equal(tensor, loaded_checkpoint)


def test_save_compatibility_with_s3_checkpoint(checkpoint_directory):
    tensor = torch.rand(3, 10, 10)
    checkpoint_name = "lightning_checkpoint.ckpt"
    s3_lightning_checkpoint = S3LightningCheckpoint(region=checkpoint_directory.region)
    s3_uri = f"{checkpoint_directory.s3_uri}{checkpoint_name}"
    s3_lightning_checkpoint.save_checkpoint(tensor, s3_uri)
    checkpoint = S3Checkpoint(region=checkpoint_directory.region)
    loaded_checkpoint = torch.load(checkpoint.reader(s3_uri), weights_only=True)
    assert torch.equal(tensor, loaded_checkpoint)


def test_delete_checkpoint(checkpoint_directory):
    tensor = torch.rand(3, 10, 10)
    checkpoint_name = "lightning_checkpoint.ckpt"
    s3_lightning_checkpoint = S3LightningCheckpoint(region=checkpoint_directory.region)
    s3_uri = f"{checkpoint_directory.s3_uri}{checkpoint_name}"
    s3_lightning_checkpoint.save_checkpoint(tensor, s3_uri)
    loaded_checkpoint = s3_lightning_checkpoint.load_checkpoint(s3_uri)
    assert torch.equal(tensor, loaded_checkpoint)
    s3_lightning_checkpoint.remove_checkpoint(s3_uri)
    with pytest.raises(S3Exception, match="Service error: The key does not exist"):
        s3_lightning_checkpoint.load_checkpoint(s3_uri)


def test_nn_checkpointing(checkpoint_directory):
    nn_model = Net()
    checkpoint_name = "lightning_neural_network_model.pt"
    s3_lightning_checkpoint = S3LightningCheckpoint(region=checkpoint_directory.region)
    s3_uri = f"{checkpoint_directory.s3_uri}{checkpoint_name}"
    epoch = 5
    loss = 0.4

    s3_lightning_checkpoint.save_checkpoint(
        {
            "epoch": epoch,
            "model_state_dict": nn_model.state_dict(),
            "loss": loss,
        },
        s3_uri,
    )

    loaded_nn_model = Net()

    # Assert models are not equal before loading from checkpoint
    assert not nn_model.equals(loaded_nn_model)

    loaded_checkpoint = s3_lightning_checkpoint.load_checkpoint(s3_uri)
    loaded_nn_model.load_state_dict(loaded_checkpoint["model_state_dict"])
    assert nn_model.equals(loaded_nn_model)

    loaded_epoch = loaded_checkpoint["epoch"]
    loaded_loss = loaded_checkpoint["loss"]
    assert loss == loaded_loss
    assert epoch == loaded_epoch

    # Assert that eval and train do not raise
    loaded_nn_model.eval()
    loaded_nn_model.train()


def _verify_equal_state_dict(
    state_dict: Dict[str, Any], loaded_state_dict: Dict[str, Any]
):
    for (model_key, model_value), (loaded_key, loaded_value) in zip(
        state_dict.items(), loaded_state_dict.items()
    ):
        # These are tuples (str, Tensor)
        assert model_key == loaded_key
        assert torch.equal(model_value, loaded_value)
