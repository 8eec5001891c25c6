//! farflash-target (being written)
