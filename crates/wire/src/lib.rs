//! farflash-wire (being written)
