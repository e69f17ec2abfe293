"""File formats every study shares: TFRecord framing and tf.train.Example images, npz, synthetic images."""
