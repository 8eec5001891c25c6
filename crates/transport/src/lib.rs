//! farflash-transport (being written)
